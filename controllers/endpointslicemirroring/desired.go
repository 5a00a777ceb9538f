// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// mirror is what one Endpoints object should become: a group of endpoints
// per address type and port set, and what could not be mirrored.
type mirror struct {
	groups map[string]*group
	// portSets holds the group key of every address type and port set the
	// subsets name, with addresses or not, for the metrics.
	portSets map[string]bool
	// invalid counts addresses that are not IPs; skipped counts every
	// address not mirrored, the invalid ones included.
	invalid, skipped int
}

// group is the content of one mirrored slice.
type group struct {
	addressType discoveryv1.AddressType
	ports       []discoveryv1.EndpointPort
	endpoints   []discoveryv1.Endpoint
	seen        map[string]bool
}

// computeDesiredMirror turns the subsets of ep into groups of at most
// maxPerSubset endpoints each, ready addresses before not-ready ones, an
// address once per group.
func computeDesiredMirror(ep *corev1.Endpoints, maxPerSubset int) mirror {
	m := mirror{groups: map[string]*group{}, portSets: map[string]bool{}}
	for _, subset := range ep.Subsets {
		ports := mirrorPorts(subset.Ports)
		m.portSets[groupKey(discoveryv1.AddressTypeIPv4, ports)] = true
		m.portSets[groupKey(discoveryv1.AddressTypeIPv6, ports)] = true
		total := len(subset.Addresses) + len(subset.NotReadyAddresses)
		added := 0
		add := func(addrs []corev1.EndpointAddress, ready bool) {
			for _, a := range addrs {
				if added >= maxPerSubset {
					return
				}
				e, addressType, ok := mirrorEndpoint(a, ready)
				if !ok {
					m.invalid++
					continue
				}
				key := groupKey(addressType, ports)
				g := m.groups[key]
				if g == nil {
					g = &group{addressType: addressType, ports: ports, seen: map[string]bool{}}
					m.groups[key] = g
				}
				if g.seen[e.Addresses[0]] {
					added++ // mirrored already, by an earlier subset or line
					continue
				}
				if len(g.endpoints) >= maxPerSubset {
					continue
				}
				g.seen[e.Addresses[0]] = true
				g.endpoints = append(g.endpoints, e)
				added++
			}
		}
		add(subset.Addresses, true)
		add(subset.NotReadyAddresses, false)
		m.skipped += total - added
	}
	for _, g := range m.groups {
		sortEndpoints(g.endpoints)
	}
	return m
}

// mirrorEndpoint converts an address; ok is false when it is not an IP.
func mirrorEndpoint(a corev1.EndpointAddress, ready bool) (discoveryv1.Endpoint, discoveryv1.AddressType, bool) {
	ip, err := netip.ParseAddr(strings.TrimSpace(a.IP))
	if err != nil || ip.Zone() != "" {
		return discoveryv1.Endpoint{}, "", false
	}
	ip = ip.Unmap()
	addressType := discoveryv1.AddressTypeIPv4
	if ip.Is6() {
		addressType = discoveryv1.AddressTypeIPv6
	}
	e := discoveryv1.Endpoint{
		Addresses:  []string{ip.String()},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
		TargetRef:  a.TargetRef.DeepCopy(),
		NodeName:   a.NodeName,
	}
	if a.Hostname != "" {
		e.Hostname = ptr.To(a.Hostname)
	}
	return e, addressType, true
}

func mirrorPorts(ps []corev1.EndpointPort) []discoveryv1.EndpointPort {
	out := make([]discoveryv1.EndpointPort, 0, len(ps))
	for _, p := range ps {
		out = append(out, discoveryv1.EndpointPort{
			Name:        ptr.To(p.Name),
			Port:        ptr.To(p.Port),
			Protocol:    ptr.To(cmp.Or(p.Protocol, corev1.ProtocolTCP)),
			AppProtocol: p.AppProtocol,
		})
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(strings.Compare(*a.Name, *b.Name), cmp.Compare(*a.Port, *b.Port), strings.Compare(string(*a.Protocol), string(*b.Protocol)))
	})
	return out
}

// groupKey identifies a slice by address type and ports.
func groupKey(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	b.WriteString(string(addressType))
	for _, p := range ports {
		b.WriteString("|" + ptr.Deref(p.Name, "") + "/" + strconv.Itoa(int(ptr.Deref(p.Port, 0))) + "/" + string(ptr.Deref(p.Protocol, "")) + "/" + ptr.Deref(p.AppProtocol, ""))
	}
	return b.String()
}

func sortEndpoints(eps []discoveryv1.Endpoint) {
	slices.SortFunc(eps, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
}

// sliceMeta is what every mirrored slice of one Endpoints carries.
type sliceMeta struct {
	namespace, name string
	labels          map[string]string
	annotations     map[string]string
	owner           metav1.OwnerReference
}

func newSliceMeta(ep *corev1.Endpoints) sliceMeta {
	labels := maps.Clone(ep.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[discoveryv1.LabelServiceName] = ep.Name
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	annotations := map[string]string{}
	for k, v := range ep.Annotations {
		if k != corev1.EndpointsLastChangeTriggerTime && k != corev1.LastAppliedConfigAnnotation {
			annotations[k] = v
		}
	}
	return sliceMeta{
		namespace: ep.Namespace, name: ep.Name, labels: labels, annotations: annotations,
		owner: metav1.OwnerReference{APIVersion: "v1", Kind: "Endpoints", Name: ep.Name, UID: ep.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
	}
}

// fill makes s hold g with the Endpoints' metadata.
func (m sliceMeta) fill(s *discoveryv1.EndpointSlice, g *group) {
	s.Namespace = m.namespace
	if s.Name == "" {
		s.GenerateName = m.name + "-"
	}
	s.Labels = maps.Clone(m.labels)
	s.Annotations = maps.Clone(m.annotations)
	s.OwnerReferences = []metav1.OwnerReference{m.owner}
	s.AddressType = g.addressType
	s.Ports = g.ports
	s.Endpoints = g.endpoints
}

// matches reports whether an existing slice already holds g as fill would.
func (m sliceMeta) matches(s *discoveryv1.EndpointSlice, g *group) bool {
	want := s.DeepCopy()
	m.fill(want, g)
	have := s.DeepCopy()
	sortEndpoints(have.Endpoints)
	if len(have.Annotations) == 0 {
		have.Annotations = map[string]string{}
	}
	return equality.Semantic.DeepEqual(have.Labels, want.Labels) &&
		equality.Semantic.DeepEqual(have.Annotations, want.Annotations) &&
		equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		equality.Semantic.DeepEqual(have.Ports, want.Ports) &&
		equality.Semantic.DeepEqual(have.Endpoints, want.Endpoints)
}

// plan is what a sync writes.
type plan struct {
	create, update, delete []*discoveryv1.EndpointSlice
	unchanged              int
}

// slicesByKey groups slices by groupKey, each group sorted by name.
func slicesByKey(existing []*discoveryv1.EndpointSlice) map[string][]*discoveryv1.EndpointSlice {
	byKey := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		k := groupKey(s.AddressType, s.Ports)
		byKey[k] = append(byKey[k], s)
	}
	for _, ss := range byKey {
		slices.SortFunc(ss, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	}
	return byKey
}

// planMirror keeps one existing slice per group (updated when it differs),
// creates the missing ones (reusing a slice that would be deleted, one
// write instead of two) and deletes the rest.
func planMirror(meta sliceMeta, m mirror, existing []*discoveryv1.EndpointSlice) plan {
	var p plan
	byKey := slicesByKey(existing)
	var spare []*discoveryv1.EndpointSlice
	for k, ss := range byKey {
		if m.groups[k] == nil {
			spare = append(spare, ss...)
			continue
		}
		spare = append(spare, ss[1:]...)
	}
	slices.SortFunc(spare, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, k := range slices.Sorted(maps.Keys(m.groups)) {
		g := m.groups[k]
		var s *discoveryv1.EndpointSlice
		switch {
		case len(byKey[k]) > 0:
			if meta.matches(byKey[k][0], g) {
				p.unchanged++
				continue
			}
			s = byKey[k][0].DeepCopy()
			p.update = append(p.update, s)
		case len(spare) > 0:
			s = spare[0].DeepCopy()
			spare = spare[1:]
			p.update = append(p.update, s)
		default:
			s = &discoveryv1.EndpointSlice{}
			p.create = append(p.create, s)
		}
		meta.fill(s, g)
	}
	p.delete = spare
	return p
}
