// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Topology-aware routing follows kube-controller-manager's EndpointSlice
// controller (k8s.io/endpointslice's topologycache and trafficdist):
//
//   - the annotation service.kubernetes.io/topology-aware-hints (deprecated)
//     or else service.kubernetes.io/topology-mode, set to Auto, wins over
//     spec.trafficDistribution;
//   - Auto spreads the ready endpoints of an address family over the zones
//     in proportion to the allocatable CPU of each zone's ready Nodes
//     (control-plane Nodes left out), keeps endpoints in their own zone
//     where it can, and writes no hints at all when a zone would be more
//     than overloadThreshold over its share, when any counted Node lacks a
//     zone or CPU, when fewer than two zones have Nodes, when there are
//     fewer endpoints than zones, or when a ready endpoint has no zone;
//   - trafficDistribution PreferClose / PreferSameZone hints each ready
//     endpoint for its own zone, PreferSameNode for its Node as well;
//   - otherwise no hints.
//
// Endpoints that are not ready get no hints.

// overloadThreshold is upstream's: no zone may receive more than 20 % over
// its CPU share of the endpoints.
const overloadThreshold = 0.2

// Upstream's Event reasons and messages for topology-mode Auto.
const (
	ReasonTopologyAwareHintsEnabled  = "TopologyAwareHintsEnabled"
	ReasonTopologyAwareHintsDisabled = "TopologyAwareHintsDisabled"

	msgNoZoneSpecified                       = "One or more endpoints do not have a zone specified"
	msgNoAllocatedHintsForZones              = "No hints allocated for zones"
	msgTopologyAwareHintsEnabled             = "Topology Aware Hints has been enabled"
	msgTopologyAwareHintsDisabled            = "Topology Aware Hints has been disabled"
	msgInsufficientNodeInfo                  = "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes"
	msgInsufficientNumberOfEndpoints         = "Insufficient number of endpoints"
	msgMinAllocationExceedsOverloadThreshold = "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold"
)

// Node labels that keep a Node out of the CPU shares, as upstream.
const (
	labelControlPlane = "node-role.kubernetes.io/control-plane"
	labelMaster       = "node-role.kubernetes.io/master"
)

// hintMode is which of the three hint policies a Service gets.
type hintMode int

const (
	hintsNone hintMode = iota
	hintsAuto
	hintsClose
)

// hintModeOf picks the policy with upstream's precedence: the annotations
// first, then trafficDistribution.
func hintModeOf(svc *corev1.Service) hintMode {
	if isTopologyAuto(svc) {
		return hintsAuto
	}
	if svc.Spec.TrafficDistribution != nil {
		switch *svc.Spec.TrafficDistribution {
		case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone,
			corev1.ServiceTrafficDistributionPreferSameNode:
			return hintsClose
		}
	}
	return hintsNone
}

// isTopologyAuto reads the annotations as upstream does: the deprecated
// one, when present, decides even if topology-mode is set too.
func isTopologyAuto(svc *corev1.Service) bool {
	v, ok := svc.Annotations[corev1.DeprecatedAnnotationTopologyAwareHints]
	if !ok {
		v = svc.Annotations[AnnotationTopologyMode]
	}
	return v == "Auto" || v == "auto"
}

// hintResult says what applyHints did for one address family, for the
// Events: auto tells whether topology-mode Auto applied, and disabled is
// upstream's message for why it wrote no hints ("" when it wrote them).
type hintResult struct {
	auto     bool
	disabled string
}

// applyHints sets the topology hints of every desired endpoint of one
// address family. ratios are the zones' CPU shares (zoneRatios), nil when
// the Nodes do not allow Auto hints.
func applyHints(svc *corev1.Service, desired desiredEndpoints, ratios map[string]float64) hintResult {
	switch hintModeOf(svc) {
	case hintsAuto:
		zoneOf, disabled := planZoneHints(ratios, readyZonedEndpoints(desired))
		setZoneHints(desired, zoneOf)
		return hintResult{auto: true, disabled: disabled}
	case hintsClose:
		sameNode := *svc.Spec.TrafficDistribution == corev1.ServiceTrafficDistributionPreferSameNode
		forEachEndpoint(desired, func(ep *discoveryv1.Endpoint) { ep.Hints = closeHints(ep, sameNode) })
	default:
		forEachEndpoint(desired, func(ep *discoveryv1.Endpoint) { ep.Hints = nil })
	}
	return hintResult{}
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

// endpointRef names one endpoint of desiredEndpoints: its port group and
// its key in the group.
type endpointRef struct {
	group, key string
}

func (a endpointRef) compare(b endpointRef) int {
	return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.key, b.key))
}

// zonedEndpoint is a ready endpoint and its zone ("" when it has none).
type zonedEndpoint struct {
	ref  endpointRef
	zone string
}

// readyZonedEndpoints lists the ready endpoints of every port group: like
// upstream, Auto shares one pool per address family, whatever the ports.
func readyZonedEndpoints(desired desiredEndpoints) []zonedEndpoint {
	var out []zonedEndpoint
	for gk, g := range desired {
		for k, ep := range g.endpoints {
			if !endpointReady(&ep) {
				continue
			}
			z := ""
			if ep.Zone != nil {
				z = *ep.Zone
			}
			out = append(out, zonedEndpoint{ref: endpointRef{gk, k}, zone: z})
		}
	}
	slices.SortFunc(out, func(a, b zonedEndpoint) int { return a.ref.compare(b.ref) })
	return out
}

// setZoneHints writes a single-zone hint on every endpoint in zoneOf and
// clears the hints of the others (all of them when zoneOf is nil).
func setZoneHints(desired desiredEndpoints, zoneOf map[endpointRef]string) {
	for gk, g := range desired {
		for k, ep := range g.endpoints {
			ep.Hints = nil
			if z, ok := zoneOf[endpointRef{gk, k}]; ok {
				ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: z}}}
			}
			g.endpoints[k] = ep
		}
	}
}

// zoneRatios is each zone's share of the allocatable CPU of the ready
// Nodes, as upstream's TopologyCache.SetNodes computes it: control-plane
// Nodes do not count, and any counted Node without a zone or CPU, or
// fewer than two zones, gives nil (no Auto hints for any Service).
func zoneRatios(nodes map[string]nodeInfo) map[string]float64 {
	cpu := map[string]int64{}
	var total int64
	for _, n := range nodes {
		if n.excluded || !n.ready {
			continue
		}
		if n.zone == "" || n.cpu == 0 {
			return nil
		}
		cpu[n.zone] += n.cpu
		total += n.cpu
	}
	if total == 0 || len(cpu) < 2 {
		return nil
	}
	ratios := make(map[string]float64, len(cpu))
	for z, c := range cpu {
		ratios[z] = float64(c) / float64(total)
	}
	return ratios
}

// allocation is how many endpoints a zone should get: at least minimum,
// which keeps it under the overload threshold, aiming at desired.
type allocation struct {
	minimum int
	desired float64
}

// zoneAllocations splits n endpoints over the zones by their CPU ratios, or
// says with upstream's message why it cannot be done safely.
func zoneAllocations(ratios map[string]float64, n int) (map[string]allocation, string) {
	if ratios == nil {
		return nil, msgInsufficientNodeInfo
	}
	if len(ratios) > n {
		return nil, fmt.Sprintf("%s (%d endpoints, %d zones)", msgInsufficientNumberOfEndpoints, n, len(ratios))
	}
	out := make(map[string]allocation, len(ratios))
	minTotal := 0
	for zone, ratio := range ratios {
		desired := ratio * float64(n)
		minimum := int(math.Ceil(desired * (1 / (1 + overloadThreshold))))
		out[zone] = allocation{minimum: minimum, desired: math.Max(desired, float64(minimum))}
		minTotal += minimum
	}
	if minTotal > n {
		return nil, fmt.Sprintf("%s (%d endpoints, %d zones)", msgMinAllocationExceedsOverloadThreshold, n, len(ratios))
	}
	return out, ""
}

// planZoneHints chooses the zone hint of each ready endpoint, or returns
// upstream's message for why there are none. Each endpoint starts in its
// own zone; zones over their desired count then give endpoints to zones
// under it, whole endpoints only, as upstream's redistribution does.
// Endpoints whose zone has no share keep their own zone, as upstream.
func planZoneHints(ratios map[string]float64, ready []zonedEndpoint) (map[endpointRef]string, string) {
	allocations, disabled := zoneAllocations(ratios, len(ready))
	if disabled != "" {
		return nil, disabled
	}
	own := map[string]int{}
	for _, e := range ready {
		if e.zone == "" {
			return nil, msgNoZoneSpecified
		}
		own[e.zone]++
	}
	if len(own) == 0 {
		return nil, msgNoAllocatedHintsForZones
	}
	giving, receiving := givingAndReceivingZones(allocations, own)
	return redistribute(ready, giving, receiving), ""
}

// givingAndReceivingZones turns the differences between what each zone has
// and what it should have into whole endpoints to move, the zone with the
// most to give giving to the zone with the most need first, until no move
// brings the zones closer (upstream's rule: stop once both sides are under
// one endpoint, or either is under half). Ties go to the first zone by
// name (upstream breaks them in map order).
func givingAndReceivingZones(allocations map[string]allocation, allocated map[string]int) (giving, receiving map[string]int) {
	toGive, toReceive := map[string]float64{}, map[string]float64{}
	for zone, a := range allocations {
		have := float64(allocated[zone])
		switch {
		case have > a.desired:
			toGive[zone] = have - a.desired
		case have < a.desired:
			toReceive[zone] = a.desired - have
		}
	}
	giving, receiving = map[string]int{}, map[string]int{}
	for {
		gz, g := most(toGive)
		rz, r := most(toReceive)
		if gz == "" || rz == "" || (g < 1 && r < 1) || g < 0.5 || r < 0.5 {
			return giving, receiving
		}
		giving[gz]++
		toGive[gz]--
		receiving[rz]++
		toReceive[rz]--
	}
}

// most returns the zone with the largest positive value, the first by name
// among equals, or "" when none is positive.
func most(m map[string]float64) (string, float64) {
	zone, best := "", 0.0
	for _, z := range slices.Sorted(maps.Keys(m)) {
		if m[z] > best {
			zone, best = z, m[z]
		}
	}
	return zone, best
}

// redistribute hints every ready endpoint for its own zone, except that
// each giving zone hands its count of endpoints (the first by reference)
// to the receiving zones, in zone-name order.
func redistribute(ready []zonedEndpoint, giving, receiving map[string]int) map[endpointRef]string {
	receivers := slices.Sorted(maps.Keys(receiving))
	zoneOf := make(map[endpointRef]string, len(ready))
	for _, e := range ready {
		zoneOf[e.ref] = e.zone
		if giving[e.zone] == 0 {
			continue
		}
		for _, rz := range receivers {
			if receiving[rz] > 0 {
				zoneOf[e.ref] = rz
				receiving[rz]--
				giving[e.zone]--
				break
			}
		}
	}
	return zoneOf
}
