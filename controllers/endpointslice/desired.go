// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"cmp"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// sliceMeta is what every slice of one Service and family carries.
type sliceMeta struct {
	service     *corev1.Service
	addressType discoveryv1.AddressType
	labels      map[string]string
}

// newSliceMeta computes the labels of a Service's slices: the Service's own
// labels, then the reserved ones, which a Service label cannot override.
func newSliceMeta(svc *corev1.Service, addressType discoveryv1.AddressType) sliceMeta {
	labels := make(map[string]string, len(svc.Labels)+3)
	for k, v := range svc.Labels {
		switch k {
		case discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, LabelHeadless:
			continue
		}
		labels[k] = v
	}
	labels[discoveryv1.LabelServiceName] = svc.Name
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		labels[LabelHeadless] = ""
	}
	return sliceMeta{service: svc, addressType: addressType, labels: labels}
}

// ownerReference is the controller reference every slice carries.
func (m sliceMeta) ownerReference() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         "v1",
		Kind:               "Service",
		Name:               m.service.Name,
		UID:                m.service.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// matches reports whether an existing slice carries the right labels and
// owner already.
func (m sliceMeta) matches(s *discoveryv1.EndpointSlice) bool {
	if !maps.Equal(s.Labels, m.labels) {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(s)
	return ref != nil && ref.UID == m.service.UID && ref.Kind == "Service"
}

// newSlice returns a slice to create.
func (m sliceMeta) newSlice(ports []discoveryv1.EndpointPort, eps []discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: m.service.Name + "-",
			Namespace:    m.service.Namespace,
		},
		AddressType: m.addressType,
	}
	m.fill(s, ports, eps)
	return s
}

// fill sets the desired metadata and content on s.
func (m sliceMeta) fill(s *discoveryv1.EndpointSlice, ports []discoveryv1.EndpointPort, eps []discoveryv1.Endpoint) {
	s.Labels = maps.Clone(m.labels)
	owner := m.ownerReference()
	refs := make([]metav1.OwnerReference, 0, len(s.OwnerReferences)+1)
	refs = append(refs, owner)
	for _, r := range s.OwnerReferences {
		if r.UID != owner.UID && (r.Controller == nil || !*r.Controller) {
			refs = append(refs, r)
		}
	}
	s.OwnerReferences = refs
	s.Ports = slices.Clone(ports)
	if s.Ports == nil {
		s.Ports = []discoveryv1.EndpointPort{}
	}
	s.Endpoints = eps
}

// plan is the difference between the slices a Service has and the ones it
// should have: only the reconciler's apply step writes it.
type plan struct {
	create []*discoveryv1.EndpointSlice
	update []*discoveryv1.EndpointSlice
	delete []*discoveryv1.EndpointSlice
	// unchanged counts existing slices that are kept as they are.
	unchanged int
	// added and removed count endpoints that appear or disappear.
	added, removed int
}

// slot is a slice being planned: an existing one (slice != nil) or a new one.
type slot struct {
	slice *discoveryv1.EndpointSlice
	eps   []discoveryv1.Endpoint
	dirty bool
}

func (s *slot) room(maxPerSlice int) int { return maxPerSlice - len(s.eps) }

// computeDesiredSlices plans the slices of one Service and address family:
// existing are this controller's slices of that family, desired the
// endpoints they should hold. At most maxPerSlice endpoints go into a slice.
//
// Existing slices keep the endpoints they have (updated in place). New
// endpoints go first into slices that are written anyway, then into full new
// slices, and the last partial batch into the existing slice that fits it
// most tightly (one write either way, but no new small slice). Finally,
// slices are merged while there are more than ceil(endpoints/maxPerSlice)+1.
// Creates and deletes in one plan are paired into
// updates, and a family with no endpoints keeps exactly one empty
// placeholder slice.
func computeDesiredSlices(meta sliceMeta, desired desiredEndpoints, existing []*discoveryv1.EndpointSlice, maxPerSlice int) plan {
	sp := &slicePlanner{meta: meta}
	sp.packGroups(desired, existing, maxPerSlice)
	if sp.slotCount() == 0 {
		sp.keepPlaceholder()
	}
	sp.writeSlots()
	sp.p.delete = sp.retired
	return sp.p
}

// slicePlanner holds one family's plan while computeDesiredSlices builds it.
type slicePlanner struct {
	meta    sliceMeta
	p       plan
	planned []groupSlots
	// retired are existing slices no group keeps: deleted, unless reused
	// for a new slice.
	retired []*discoveryv1.EndpointSlice
}

// groupSlots are the planned slices of one port group.
type groupSlots struct {
	ports []discoveryv1.EndpointPort
	slots []*slot
}

// packGroups plans every port group, desired or existing, in key order;
// the slices of groups without endpoints are retired.
func (sp *slicePlanner) packGroups(desired desiredEndpoints, existing []*discoveryv1.EndpointSlice, maxPerSlice int) {
	existingByKey := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := portKey(sortedPorts(s.Ports))
		existingByKey[k] = append(existingByKey[k], s)
	}
	keys := slices.Collect(maps.Keys(desired))
	for k := range existingByKey {
		if _, ok := desired[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		g := desired[key]
		ex := existingByKey[key]
		slices.SortFunc(ex, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
		if g == nil || len(g.endpoints) == 0 {
			// As upstream, the endpoints of a port set that is no longer
			// wanted do not count as removed: only those that leave a
			// port set that stays do.
			sp.retired = append(sp.retired, ex...)
			continue
		}
		slots, gone, added, removed := packGroup(sp.meta, g, ex, maxPerSlice)
		sp.p.added += added
		sp.p.removed += removed
		sp.retired = append(sp.retired, gone...)
		sp.planned = append(sp.planned, groupSlots{ports: g.ports, slots: slots})
	}
}

func (sp *slicePlanner) slotCount() int {
	total := 0
	for _, g := range sp.planned {
		total += len(g.slots)
	}
	return total
}

// keepPlaceholder keeps exactly one empty slice for a family without
// endpoints: an existing empty one if there is one, so that a Service
// without endpoints costs no write.
func (sp *slicePlanner) keepPlaceholder() {
	i := slices.IndexFunc(sp.retired, func(s *discoveryv1.EndpointSlice) bool { return len(s.Endpoints) == 0 && len(s.Ports) == 0 })
	if i < 0 {
		sp.planned = append(sp.planned, groupSlots{slots: []*slot{{dirty: true}}})
		return
	}
	s := sp.retired[i]
	sp.retired = slices.Delete(sp.retired, i, i+1)
	if sp.meta.matches(s) {
		sp.p.unchanged++
		return
	}
	u := s.DeepCopy()
	sp.meta.fill(u, nil, nil)
	sp.p.update = append(sp.p.update, u)
}

// writeSlots turns the slots into creates and updates; a new slot rewrites
// a retired slice where there is one, one write instead of two.
func (sp *slicePlanner) writeSlots() {
	for _, g := range sp.planned {
		for _, sl := range g.slots {
			switch {
			case sl.slice == nil && len(sp.retired) > 0:
				u := sp.retired[0].DeepCopy()
				sp.retired = sp.retired[1:]
				sp.meta.fill(u, g.ports, sl.eps)
				sp.p.update = append(sp.p.update, u)
			case sl.slice == nil:
				sp.p.create = append(sp.p.create, sp.meta.newSlice(g.ports, sl.eps))
			case sl.dirty:
				u := sl.slice.DeepCopy()
				sp.meta.fill(u, g.ports, sl.eps)
				sp.p.update = append(sp.p.update, u)
			default:
				sp.p.unchanged++
			}
		}
	}
}

// packGroup plans the slices of one port group. It returns the slots to
// keep or create, the existing slices to retire, and how many endpoints are
// added and removed.
func packGroup(meta sliceMeta, g *portGroup, existing []*discoveryv1.EndpointSlice, maxPerSlice int) (slots []*slot, retired []*discoveryv1.EndpointSlice, added, removed int) {
	pk := &groupPacker{meta: meta, g: g, maxPerSlice: maxPerSlice}
	placed := pk.keepExisting(existing)
	pk.collectPending(placed)
	added = len(pk.pending)
	pk.fillDirtySlots()
	pk.addFullSlots()
	pk.placeRemainder()
	pk.mergeSparseSlots()
	return pk.slots, pk.retired, added, pk.removed
}

// groupPacker holds one port group's plan while packGroup builds it.
type groupPacker struct {
	meta        sliceMeta
	g           *portGroup
	maxPerSlice int

	slots   []*slot
	retired []*discoveryv1.EndpointSlice
	// pending are the keys of wanted endpoints in no slot yet, sorted.
	pending []string
	removed int
}

// keepExisting keeps each existing slice's endpoints that are still
// wanted (once, and no more than maxPerSlice), marking what changed, and
// retires slices left empty. It returns the endpoints it placed.
func (pk *groupPacker) keepExisting(existing []*discoveryv1.EndpointSlice) map[string]bool {
	placed := make(map[string]bool, len(pk.g.endpoints))
	for _, s := range existing {
		sl := &slot{slice: s, dirty: !pk.meta.matches(s)}
		for _, ep := range s.Endpoints {
			k := endpointKey(ep)
			want, ok := pk.g.endpoints[k]
			switch {
			case !ok:
				pk.removed++
				sl.dirty = true
			case placed[k] || len(sl.eps) >= pk.maxPerSlice:
				// A duplicate, or an overflow after maxPerSlice was lowered:
				// it is placed elsewhere later.
				sl.dirty = true
			default:
				if !equality.Semantic.DeepEqual(ep, want) {
					sl.dirty = true
				}
				sl.eps = append(sl.eps, want)
				placed[k] = true
			}
		}
		if len(sl.eps) == 0 {
			pk.retired = append(pk.retired, s)
			continue
		}
		pk.slots = append(pk.slots, sl)
	}
	return placed
}

func (pk *groupPacker) collectPending(placed map[string]bool) {
	for k := range pk.g.endpoints {
		if !placed[k] {
			pk.pending = append(pk.pending, k)
		}
	}
	slices.Sort(pk.pending)
}

// take moves the next n pending endpoints into sl.
func (pk *groupPacker) take(sl *slot, n int) {
	for _, k := range pk.pending[:n] {
		sl.eps = append(sl.eps, pk.g.endpoints[k])
	}
	pk.pending = pk.pending[n:]
	sl.dirty = true
}

// fillDirtySlots tops up the slices that are written anyway, fullest first
// so that they fill up.
func (pk *groupPacker) fillDirtySlots() {
	byFill := slices.Clone(pk.slots)
	slices.SortStableFunc(byFill, func(a, b *slot) int { return cmp.Compare(len(b.eps), len(a.eps)) })
	for _, sl := range byFill {
		if len(pk.pending) == 0 {
			return
		}
		if room := sl.room(pk.maxPerSlice); sl.dirty && room > 0 {
			pk.take(sl, min(room, len(pk.pending)))
		}
	}
}

// addFullSlots creates full new slices while there is enough for one.
func (pk *groupPacker) addFullSlots() {
	for len(pk.pending) >= pk.maxPerSlice {
		sl := &slot{}
		pk.take(sl, pk.maxPerSlice)
		pk.slots = append(pk.slots, sl)
	}
}

// placeRemainder puts what is left into the clean slice that fits it most
// tightly, else a new slice. Either costs one write.
func (pk *groupPacker) placeRemainder() {
	if len(pk.pending) == 0 {
		return
	}
	var best *slot
	for _, sl := range pk.slots {
		if !sl.dirty && sl.room(pk.maxPerSlice) >= len(pk.pending) && (best == nil || sl.room(pk.maxPerSlice) < best.room(pk.maxPerSlice)) {
			best = sl
		}
	}
	if best == nil {
		best = &slot{}
		pk.slots = append(pk.slots, best)
	}
	pk.take(best, len(pk.pending))
}

// mergeSparseSlots merges slices left half empty by scale-downs, down to
// one more than the minimum. Merging further would save a slice but cost a
// delete now and, in a rolling update, a create again soon after.
func (pk *groupPacker) mergeSparseSlots() {
	target := (len(pk.g.endpoints) + pk.maxPerSlice - 1) / pk.maxPerSlice
	for len(pk.slots) > target+1 {
		slices.SortStableFunc(pk.slots, func(a, b *slot) int { return cmp.Compare(len(a.eps), len(b.eps)) })
		donor, rest := pk.slots[0], pk.slots[1:]
		if !pk.spread(donor, rest) {
			return
		}
		if donor.slice != nil {
			pk.retired = append(pk.retired, donor.slice)
		}
		pk.slots = rest
	}
}

// spread moves the donor's endpoints into the other slots: dirty ones
// first (no extra write), then the fullest clean ones. It reports whether
// the donor was emptied.
func (pk *groupPacker) spread(donor *slot, others []*slot) bool {
	recipients := slices.Clone(others)
	slices.SortStableFunc(recipients, func(a, b *slot) int {
		if a.dirty != b.dirty {
			if a.dirty {
				return -1
			}
			return 1
		}
		return cmp.Compare(len(b.eps), len(a.eps))
	})
	moving := donor.eps
	for _, r := range recipients {
		if len(moving) == 0 {
			break
		}
		n := min(r.room(pk.maxPerSlice), len(moving))
		if n == 0 {
			continue
		}
		r.eps = append(r.eps, moving[:n]...)
		r.dirty = true
		moving = moving[n:]
	}
	if len(moving) > 0 {
		// Cannot happen while there are two slices more than needed: the
		// others have at least a slice's worth of room.
		donor.eps = moving
		return false
	}
	return true
}
