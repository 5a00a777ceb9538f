package endpointslice

import (
	"cmp"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// applyHints sets the topology hints of every desired endpoint, the way the
// upstream controller does:
//   - trafficDistribution PreferClose / PreferSameZone: each ready endpoint
//     is hinted for its own zone; PreferSameNode adds its own node;
//   - annotation service.kubernetes.io/topology-mode: Auto: ready endpoints
//     are spread over the zones in proportion to the allocatable CPU of the
//     zone's ready Nodes, and no hints at all when that cannot be done
//     safely (an endpoint without a known zone, fewer endpoints than zones,
//     a zone left with none);
//   - otherwise no hints.
//
// Endpoints that are not ready get no hints.
func applyHints(svc *corev1.Service, desired desiredEndpoints, nodes map[string]nodeInfo) {
	td := ""
	if svc.Spec.TrafficDistribution != nil {
		td = *svc.Spec.TrafficDistribution
	}
	switch {
	case td == corev1.ServiceTrafficDistributionPreferClose, td == corev1.ServiceTrafficDistributionPreferSameZone, td == corev1.ServiceTrafficDistributionPreferSameNode:
		forEachEndpoint(desired, func(ep *discoveryv1.Endpoint) {
			ep.Hints = closeHints(ep, td == corev1.ServiceTrafficDistributionPreferSameNode)
		})
	case isTopologyAuto(svc):
		if !autoHints(desired, nodes) {
			forEachEndpoint(desired, func(ep *discoveryv1.Endpoint) { ep.Hints = nil })
		}
	default:
		forEachEndpoint(desired, func(ep *discoveryv1.Endpoint) { ep.Hints = nil })
	}
}

func isTopologyAuto(svc *corev1.Service) bool {
	v, ok := svc.Annotations[AnnotationTopologyMode]
	if !ok {
		v = svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	}
	return v == "Auto" || v == "auto"
}

func forEachEndpoint(desired desiredEndpoints, f func(*discoveryv1.Endpoint)) {
	for _, g := range desired {
		for k, ep := range g.endpoints {
			f(&ep)
			g.endpoints[k] = ep
		}
	}
}

func endpointReady(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready != nil && *ep.Conditions.Ready
}

func closeHints(ep *discoveryv1.Endpoint, sameNode bool) *discoveryv1.EndpointHints {
	if !endpointReady(ep) {
		return nil
	}
	var h discoveryv1.EndpointHints
	if ep.Zone != nil {
		h.ForZones = []discoveryv1.ForZone{{Name: *ep.Zone}}
	}
	if sameNode && ep.NodeName != nil {
		h.ForNodes = []discoveryv1.ForNode{{Name: *ep.NodeName}}
	}
	if h.ForZones == nil && h.ForNodes == nil {
		return nil
	}
	return &h
}

// autoHints assigns zone hints proportional to each zone's CPU. It returns
// false, leaving the endpoints untouched, when hints would be unsafe.
func autoHints(desired desiredEndpoints, nodes map[string]nodeInfo) bool {
	cpu := zoneCPUOf(nodes)
	if len(cpu.byZone) == 0 {
		return false
	}
	for _, g := range desired {
		var ready []zonedEndpoint
		for k, ep := range g.endpoints {
			if !endpointReady(&ep) {
				continue
			}
			if ep.Zone == nil || cpu.byZone[*ep.Zone] == 0 {
				return false
			}
			ready = append(ready, zonedEndpoint{key: k, zone: *ep.Zone})
		}
		if len(ready) < len(cpu.zones) {
			return false
		}
		hintFor, ok := assignZones(ready, cpu.zones, cpu.shares(len(ready)))
		if !ok {
			return false
		}
		for k, ep := range g.endpoints {
			if z, ok := hintFor[k]; ok {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: z}}}
			} else {
				ep.Hints = nil
			}
			g.endpoints[k] = ep
		}
	}
	return true
}

// zoneCPU is the allocatable CPU of the ready Nodes, by zone.
type zoneCPU struct {
	byZone map[string]int64
	total  int64
	zones  []string // sorted
}

func zoneCPUOf(nodes map[string]nodeInfo) zoneCPU {
	c := zoneCPU{byZone: map[string]int64{}}
	for _, n := range nodes {
		if n.ready && n.zone != "" && n.cpu > 0 {
			c.byZone[n.zone] += n.cpu
			c.total += n.cpu
		}
	}
	c.zones = slices.Sorted(maps.Keys(c.byZone))
	return c
}

// shares splits n endpoints over the zones in proportion to their CPU, at
// least one each, by largest remainder so that the shares add up to n.
func (c zoneCPU) shares(n int) map[string]int {
	share := map[string]int{}
	type remainder struct {
		zone string
		frac float64
	}
	var rems []remainder
	assigned := 0
	for _, z := range c.zones {
		exact := float64(n) * float64(c.byZone[z]) / float64(c.total)
		k := max(1, int(math.Floor(exact)))
		share[z] = k
		assigned += k
		rems = append(rems, remainder{z, exact - math.Floor(exact)})
	}
	slices.SortStableFunc(rems, func(a, b remainder) int { return cmp.Compare(b.frac, a.frac) })
	for i := 0; assigned < n; i++ {
		share[rems[i%len(rems)].zone]++
		assigned++
	}
	for i := len(rems) - 1; assigned > n && i >= 0; i-- {
		if share[rems[i].zone] > 1 {
			share[rems[i].zone]--
			assigned--
		}
	}
	return share
}

// zonedEndpoint is a ready endpoint (by key) and its zone.
type zonedEndpoint struct {
	key, zone string
}

// assignZones gives each endpoint a zone: its own up to the zone's share,
// the surplus lent to zones short of theirs. ok is false when a zone would
// get none.
func assignZones(ready []zonedEndpoint, zones []string, share map[string]int) (hintFor map[string]string, ok bool) {
	slices.SortFunc(ready, func(a, b zonedEndpoint) int { return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.key, b.key)) })
	hintFor = map[string]string{}
	used := map[string]int{}
	var surplus []string
	for _, r := range ready {
		if used[r.zone] < share[r.zone] {
			hintFor[r.key] = r.zone
			used[r.zone]++
		} else {
			surplus = append(surplus, r.key)
		}
	}
	for _, z := range zones {
		for used[z] < share[z] && len(surplus) > 0 {
			hintFor[surplus[0]] = z
			surplus = surplus[1:]
			used[z]++
		}
		if used[z] == 0 {
			return nil, false
		}
	}
	return hintFor, true
}
