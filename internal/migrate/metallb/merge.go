// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// merge joins announcements that select the same pools, Services and
// nodes (and, in BGP, speak as the same AS): svcnet refuses two of a mode
// for one pool on one node, where MetalLB announces from both. The
// typical case is two BGPAdvertisements of a pool that differ only in
// aggregationLength, communities or localPref; their peers and path
// attributes are joined. Two L2 ones join their interfaces (none: the
// default, which wins).
func merge(anns []svcnetv1alpha1.LoadBalancerAnnouncement, warnings *[]Warning) []svcnetv1alpha1.LoadBalancerAnnouncement {
	var out []svcnetv1alpha1.LoadBalancerAnnouncement
	index := map[string]int{}
	for _, a := range anns {
		key := strings.Join([]string{string(a.Spec.Mode), selectorKey(a.Spec.PoolSelector), selectorKey(a.Spec.ServiceSelector), selectorKey(a.Spec.NodeSelector)}, "|")
		if a.Spec.BGP != nil {
			key += fmt.Sprintf("|%d", a.Spec.BGP.LocalASN)
		}
		i, ok := index[key]
		if !ok {
			index[key] = len(out)
			out = append(out, a)
			continue
		}
		into := &out[i]
		into.Annotations[SourceAnnotation] += ", " + a.Annotations[SourceAnnotation]
		if a.Spec.Mode == svcnetv1alpha1.AnnouncementModeL2 {
			if len(into.Spec.Interfaces) > 0 && len(a.Spec.Interfaces) > 0 {
				into.Spec.Interfaces = sortedNames(append(into.Spec.Interfaces, a.Spec.Interfaces...))
			} else {
				into.Spec.Interfaces = nil
			}
			continue
		}
		joinAttributes(into, a, warnings)
		joinPeers(into, a, warnings)
	}
	for i := range out {
		if b := out[i].Spec.BGP; b != nil {
			slices.SortFunc(b.Peers, func(p, q svcnetv1alpha1.BGPPeer) int { return strings.Compare(p.Address, q.Address) })
		}
	}
	return out
}

// joinPeers adds a's peers to into's. A router both list with different
// settings (two BGPPeers of one address on other nodes) keeps into's: an
// announcement lists a router once.
func joinPeers(into *svcnetv1alpha1.LoadBalancerAnnouncement, a svcnetv1alpha1.LoadBalancerAnnouncement, warnings *[]Warning) {
	for _, p := range a.Spec.BGP.Peers {
		i := slices.IndexFunc(into.Spec.BGP.Peers, func(q svcnetv1alpha1.BGPPeer) bool { return q.Address == p.Address })
		switch {
		case i < 0:
			into.Spec.BGP.Peers = append(into.Spec.BGP.Peers, p)
		case !equality.Semantic.DeepEqual(into.Spec.BGP.Peers[i], p):
			*warnings = append(*warnings, Warning{Object: a.Annotations[SourceAnnotation], Field: "spec.peers",
				Reason: fmt.Sprintf("joined with %s, which advertises to %s through a BGPPeer of other settings or nodes; svcnet lists a router once per announcement, so this one's is left out", into.Name, p.Address)})
		}
	}
}

// limitPeers cuts announcements to the CRD's number of peers.
func limitPeers(anns []svcnetv1alpha1.LoadBalancerAnnouncement, warnings *[]Warning) {
	for i := range anns {
		if b := anns[i].Spec.BGP; b != nil && len(b.Peers) > maxPeers {
			*warnings = append(*warnings, Warning{Object: anns[i].Annotations[SourceAnnotation], Field: "spec.peers",
				Reason: fmt.Sprintf("%d peers, more than an announcement's %d: those from %s on are left out", len(b.Peers), maxPeers, b.Peers[maxPeers].Address)})
			b.Peers = b.Peers[:maxPeers]
		}
	}
}

// nameUniquely renames announcements whose names collide, as an
// L2Advertisement's and a BGPAdvertisement's of the same name would:
// the BGP one gets "-bgp", then a number.
func nameUniquely(anns []svcnetv1alpha1.LoadBalancerAnnouncement) {
	taken := map[string]bool{}
	for i := range anns {
		name := anns[i].Name
		if taken[name] && anns[i].Spec.Mode == svcnetv1alpha1.AnnouncementModeBGP {
			name += "-bgp"
		}
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s-%d", anns[i].Name, n)
		}
		taken[name] = true
		anns[i].Name = name
	}
}

// warnOverlaps warns about two announcements of a mode that may both
// announce a pool on one node: svcnet accepts the older (created
// together: the first by name) and refuses the other with reason Overlap.
func warnOverlaps(anns []svcnetv1alpha1.LoadBalancerAnnouncement, pools []svcnetv1alpha1.LoadBalancerIPPool, warnings *[]Warning) {
	for j := range anns {
		for i := range j {
			a, b := &anns[i], &anns[j]
			if a.Spec.Mode != b.Spec.Mode || disjoint(a.Spec.NodeSelector, b.Spec.NodeSelector) {
				continue
			}
			pool, ok := commonPool(a, b, pools)
			if !ok {
				continue
			}
			*warnings = append(*warnings, Warning{Object: b.Annotations[SourceAnnotation],
				Reason: fmt.Sprintf("converted to LoadBalancerAnnouncement %s, which svcnet refuses (Overlap) if created with %s (from %s): both announce pool %s in mode %s on nodes both may select; MetalLB announces from both, svcnet wants one announcement per pool and node. Make their nodeSelectors or pools disjoint, or join them",
					b.Name, a.Name, a.Annotations[SourceAnnotation], pool, a.Spec.Mode)})
			break
		}
	}
}

// commonPool finds a converted pool both announcements select.
func commonPool(a, b *svcnetv1alpha1.LoadBalancerAnnouncement, pools []svcnetv1alpha1.LoadBalancerIPPool) (string, bool) {
	sa, errA := selectorOf(a.Spec.PoolSelector)
	sb, errB := selectorOf(b.Spec.PoolSelector)
	if errA != nil || errB != nil {
		return "", false
	}
	for _, p := range pools {
		if sa.Matches(labels.Set(p.Labels)) && sb.Matches(labels.Set(p.Labels)) {
			return p.Name, true
		}
	}
	return "", false
}

func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// selectorKey is a canonical form of a selector: equal for selectors that
// select the same by the same requirements.
func selectorKey(s *metav1.LabelSelector) string {
	sel, err := selectorOf(s)
	if err != nil {
		return fmt.Sprintf("invalid:%v", s)
	}
	return sel.String()
}

// and is the selector that selects what both select; nil is everything.
func and(a, b *metav1.LabelSelector) *metav1.LabelSelector {
	if a == nil {
		return b.DeepCopy()
	}
	if b == nil {
		return a.DeepCopy()
	}
	out := a.DeepCopy()
	for k, v := range b.MatchLabels {
		if w, ok := out.MatchLabels[k]; ok && w != v {
			// Never true; as matchExpressions the selector says so.
			out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
			continue
		}
		if out.MatchLabels == nil {
			out.MatchLabels = map[string]string{}
		}
		out.MatchLabels[k] = v
	}
	out.MatchExpressions = append(out.MatchExpressions, b.DeepCopy().MatchExpressions...)
	return out
}

// disjoint tells whether no label set matches both selectors, as far as
// their requirements on one key show it.
func disjoint(a, b *metav1.LabelSelector) bool {
	sa, errA := selectorOf(a)
	sb, errB := selectorOf(b)
	if errA != nil || errB != nil {
		return false
	}
	ra, _ := sa.Requirements()
	rb, _ := sb.Requirements()
	for _, x := range ra {
		for _, y := range rb {
			if x.Key() == y.Key() && contradict(x, y) {
				return true
			}
		}
	}
	return false
}

// contradict tells whether two requirements on one key exclude each other.
func contradict(x, y labels.Requirement) bool {
	in := func(r labels.Requirement) bool {
		op := r.Operator()
		return op == selection.In || op == selection.Equals || op == selection.DoubleEquals
	}
	needs := func(r labels.Requirement) bool { return in(r) || r.Operator() == selection.Exists }
	notIn := func(r labels.Requirement) bool {
		return r.Operator() == selection.NotIn || r.Operator() == selection.NotEquals
	}
	switch {
	case needs(x) && y.Operator() == selection.DoesNotExist, needs(y) && x.Operator() == selection.DoesNotExist:
		return true
	case in(x) && in(y):
		return x.Values().Intersection(y.Values()).Len() == 0
	case in(x) && notIn(y):
		return y.Values().IsSuperset(x.Values())
	case notIn(x) && in(y):
		return x.Values().IsSuperset(y.Values())
	}
	return false
}
