// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
// ServiceCIDR or a more senior pool. Of two overlapping pools only the
// newcomer stops, so that one operator's mistake never takes out a pool
// that already serves (seniority: a pool whose status says Ready, earliest
// Ready first, then the oldest).
func judgePools(pools []svcnetv1alpha1.LoadBalancerIPPool, cidrs []networkingv1.ServiceCIDR) map[string]*poolState {
	out := make(map[string]*poolState, len(pools))
	var candidates []*poolState
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
		default:
			if msg := overlapsCIDR(st.ranges, cidrs); msg != "" {
				st.reason, st.message = svcnetv1alpha1.ReasonPoolOverlap, msg
			} else {
				candidates = append(candidates, st)
			}
		}
		out[p.Name] = st
	}
	slices.SortFunc(candidates, func(a, b *poolState) int { return compareSeniority(a.pool, b.pool) })
	var accepted []*poolState
	for _, st := range candidates {
		if senior, r, o, ok := firstOverlap(st, accepted); ok {
			st.reason = svcnetv1alpha1.ReasonPoolOverlap
			st.message = fmt.Sprintf("range %s overlaps range %s of LoadBalancerIPPool %s, which serves first", r, o, senior.pool.Name)
			continue
		}
		st.ready, st.reason, st.message = true, svcnetv1alpha1.ReasonPoolReady, "the pool gives addresses"
		accepted = append(accepted, st)
	}
	return out
}

// compareSeniority orders pools for overlaps: Ready (by its status) before
// not Ready, earlier Ready first, then older, then by name.
func compareSeniority(a, b *svcnetv1alpha1.LoadBalancerIPPool) int {
	readyA, sinceA := readySince(a)
	readyB, sinceB := readySince(b)
	if readyA != readyB {
		if readyA {
			return -1
		}
		return 1
	}
	return cmp.Or(
		sinceA.Compare(sinceB),
		a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		strings.Compare(a.Name, b.Name),
	)
}

// readySince reports whether the pool's status says Ready, and since when.
func readySince(p *svcnetv1alpha1.LoadBalancerIPPool) (bool, time.Time) {
	c := apimeta.FindStatusCondition(p.Status.Conditions, "Ready")
	if c == nil || c.Status != metav1.ConditionTrue {
		return false, time.Time{}
	}
	return true, c.LastTransitionTime.Time
}

// firstOverlap finds the first of the accepted pools that st overlaps.
func firstOverlap(st *poolState, accepted []*poolState) (*poolState, lbipam.Range, lbipam.Range, bool) {
	for _, other := range accepted {
		if r, o, ok := overlapping(st.ranges, other.ranges); ok {
			return other, r, o, true
		}
	}
	return nil, lbipam.Range{}, lbipam.Range{}, false
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
