package endpointslice

import (
	"cmp"
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
	cpuByZone := map[string]int64{}
	var totalCPU int64
	for _, n := range nodes {
		if n.ready && n.zone != "" && n.cpu > 0 {
			cpuByZone[n.zone] += n.cpu
			totalCPU += n.cpu
		}
	}
	if len(cpuByZone) == 0 {
		return false
	}
	zones := make([]string, 0, len(cpuByZone))
	for z := range cpuByZone {
		zones = append(zones, z)
	}
	slices.Sort(zones)

	for _, g := range desired {
		type ref struct {
			key  string
			zone string
		}
		var ready []ref
		for k, ep := range g.endpoints {
			if !endpointReady(&ep) {
				continue
			}
			if ep.Zone == nil || cpuByZone[*ep.Zone] == 0 {
				return false
			}
			ready = append(ready, ref{key: k, zone: *ep.Zone})
		}
		if len(ready) < len(zones) {
			return false
		}
		// Each zone's share, by largest remainder so the shares add up.
		share := map[string]int{}
		type rem struct {
			zone string
			frac float64
		}
		var rems []rem
		assigned := 0
		for _, z := range zones {
			exact := float64(len(ready)) * float64(cpuByZone[z]) / float64(totalCPU)
			n := max(1, int(math.Floor(exact)))
			share[z] = n
			assigned += n
			rems = append(rems, rem{z, exact - math.Floor(exact)})
		}
		slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.frac, a.frac) })
		for i := 0; assigned < len(ready); i++ {
			share[rems[i%len(rems)].zone]++
			assigned++
		}
		for i := len(rems) - 1; assigned > len(ready) && i >= 0; i-- {
			if share[rems[i].zone] > 1 {
				share[rems[i].zone]--
				assigned--
			}
		}
		// Endpoints serve their own zone up to its share; the surplus is
		// lent to zones short of theirs.
		slices.SortFunc(ready, func(a, b ref) int { return cmp.Or(cmp.Compare(a.zone, b.zone), cmp.Compare(a.key, b.key)) })
		hintFor := map[string]string{}
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
				return false
			}
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
