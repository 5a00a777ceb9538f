package loadbalancer

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// poolState is one pool as judged against the others and the ServiceCIDRs.
type poolState struct {
	pool   *svcnetv1alpha1.LoadBalancerIPPool
	ranges []lbipam.Range
	// reason and message explain the Ready condition; ready pools give
	// new addresses.
	ready           bool
	reason, message string
}

func poolRanges(p *svcnetv1alpha1.LoadBalancerIPPool) ([]lbipam.Range, error) {
	pairs := make([][2]string, 0, len(p.Spec.Ranges))
	for _, r := range p.Spec.Ranges {
		pairs = append(pairs, [2]string{r.Start, r.End})
	}
	return lbipam.ParseRanges(p.Spec.CIDRs, pairs)
}

// judgePools decides which pools may give addresses: a pool is not Ready
// when its spec cannot be used, when it is disabled, or when it overlaps a
// ServiceCIDR or another pool (both overlapping pools stop: neither can
// tell which of them an address belongs to).
func judgePools(pools []svcnetv1alpha1.LoadBalancerIPPool, cidrs []networkingv1.ServiceCIDR) map[string]*poolState {
	out := make(map[string]*poolState, len(pools))
	for i := range pools {
		p := &pools[i]
		st := &poolState{pool: p}
		rs, err := poolRanges(p)
		st.ranges = rs
		switch {
		case err != nil:
			st.reason, st.message = svcnetv1alpha1.ReasonPoolInvalid, err.Error()
		case p.Spec.Disabled:
			st.reason, st.message = svcnetv1alpha1.ReasonPoolDisabled, "the pool is disabled: Services keep its addresses, no new one is given"
		}
		out[p.Name] = st
	}
	names := make([]string, 0, len(out))
	for n := range out {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		st := out[n]
		if st.reason != "" {
			continue
		}
		if msg := overlapsCIDR(st.ranges, cidrs); msg != "" {
			st.reason, st.message = svcnetv1alpha1.ReasonPoolOverlap, msg
			continue
		}
		for _, other := range names {
			if other == n || out[other].pool.Spec.Disabled {
				continue
			}
			if r, o, ok := overlapping(st.ranges, out[other].ranges); ok {
				st.reason = svcnetv1alpha1.ReasonPoolOverlap
				st.message = fmt.Sprintf("range %s overlaps range %s of LoadBalancerIPPool %s", r, o, other)
				break
			}
		}
		if st.reason == "" {
			st.ready, st.reason, st.message = true, svcnetv1alpha1.ReasonPoolReady, "the pool gives addresses"
		}
	}
	return out
}

func overlapsCIDR(rs []lbipam.Range, cidrs []networkingv1.ServiceCIDR) string {
	for _, sc := range cidrs {
		for _, c := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			for _, r := range rs {
				if r.OverlapsPrefix(p) {
					return fmt.Sprintf("range %s overlaps ServiceCIDR %s (%s): ClusterIPs and LoadBalancer IPs must not mix", r, sc.Name, p)
				}
			}
		}
	}
	return ""
}

func overlapping(a, b []lbipam.Range) (lbipam.Range, lbipam.Range, bool) {
	for _, x := range a {
		for _, y := range b {
			if x.Overlaps(y) {
				return x, y, true
			}
		}
	}
	return lbipam.Range{}, lbipam.Range{}, false
}

// selects reports whether a pool's selectors take a Service in a namespace
// with nsLabels. A selector that does not parse selects nothing.
func selects(p *svcnetv1alpha1.LoadBalancerIPPool, svc *corev1.Service, nsLabels map[string]string) bool {
	match := func(sel *metav1.LabelSelector, set map[string]string) bool {
		if sel == nil {
			return true
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(labels.Set(set))
	}
	return match(p.Spec.NamespaceSelector, nsLabels) && match(p.Spec.ServiceSelector, svc.Labels)
}

// eligible lists the Ready pools that take svc, highest priority first,
// then by name.
func eligible(states map[string]*poolState, svc *corev1.Service, nsLabels map[string]string) []string {
	var ps []*svcnetv1alpha1.LoadBalancerIPPool
	for _, st := range states {
		if st.ready && selects(st.pool, svc, nsLabels) {
			ps = append(ps, st.pool)
		}
	}
	slices.SortFunc(ps, func(a, b *svcnetv1alpha1.LoadBalancerIPPool) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), strings.Compare(a.Name, b.Name))
	})
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// capacityString renders a capacity, saturated ones as a lower bound.
func capacityString(c uint64) string {
	if c == ^uint64(0) {
		return ">=" + strconv.FormatUint(c, 10)
	}
	return strconv.FormatUint(c, 10)
}
