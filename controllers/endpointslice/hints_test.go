// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/endpointslice/topologycache"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/test/builder"
)

// testNode is a Node as the hint tests describe it.
type testNode struct {
	zone         string
	cpu          string // allocatable CPU; "" for none
	notReady     bool
	controlPlane bool
}

func (n testNode) obj(name string) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if n.zone != "" {
		node.Labels[corev1.LabelTopologyZone] = n.zone
	}
	if n.controlPlane {
		node.Labels[labelControlPlane] = ""
	}
	if n.cpu != "" {
		node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(n.cpu)}
	}
	status := corev1.ConditionTrue
	if n.notReady {
		status = corev1.ConditionFalse
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return node
}

func nodeInfosOf(nodes []testNode) map[string]nodeInfo {
	out := map[string]nodeInfo{}
	for i, n := range nodes {
		name := fmt.Sprintf("node-%d", i)
		out[name] = nodeInfoOf(n.obj(name))
	}
	return out
}

// TestZoneRatios re-expresses upstream's TestSetNodes (topologycache).
func TestZoneRatios(t *testing.T) {
	tests := map[string]struct {
		nodes []testNode
		want  map[string]float64
	}{
		"empty":       {},
		"single node": {nodes: []testNode{{zone: "zone-a", cpu: "1000m"}}},
		"single zone": {nodes: []testNode{{zone: "zone-a", cpu: "1000m"}, {zone: "zone-a", cpu: "1000m"}}},
		"2 zones": {
			nodes: []testNode{{zone: "zone-a", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m"}},
			want:  map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
		},
		"2 zones, unready node in 1, ready node in 1": {
			nodes: []testNode{{zone: "zone-a", cpu: "1000m", notReady: true}, {zone: "zone-b", cpu: "1000m"}},
		},
		"2 zones, control plane node in 1, ready node in 1": {
			nodes: []testNode{{zone: "zone-a", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m", controlPlane: true}},
		},
		"2 zones, unready node in 1, ready node in 2": {
			nodes: []testNode{{zone: "zone-a", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m", notReady: true}},
			want:  map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
		},
		"2 zones, control plane node in 1, ready node in 2": {
			nodes: []testNode{{zone: "zone-a", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m"}, {zone: "zone-b", cpu: "1000m", controlPlane: true}},
			want:  map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
		},
		"3 zones, 4 nodes in 1, 2 nodes in 1, 1 node in 1": {
			nodes: []testNode{
				{zone: "zone-a", cpu: "1000m"}, {zone: "zone-a", cpu: "1000m"}, {zone: "zone-a", cpu: "1000m"}, {zone: "zone-a", cpu: "2000m"},
				{zone: "zone-b", cpu: "3000m"}, {zone: "zone-b", cpu: "1500m"},
				{zone: "zone-c", cpu: "500m"},
			},
			want: map[string]float64{"zone-a": 0.5, "zone-b": 0.45, "zone-c": 0.05},
		},
		// Beyond upstream's table, from its code:
		"a Node without a zone turns hints off": {
			nodes: []testNode{{zone: "zone-a", cpu: "1"}, {zone: "zone-b", cpu: "1"}, {cpu: "1"}},
		},
		"a Node without CPU turns hints off": {
			nodes: []testNode{{zone: "zone-a", cpu: "1"}, {zone: "zone-b", cpu: "1"}, {zone: "zone-b"}},
		},
		"a control-plane Node without a zone does not count": {
			nodes: []testNode{{zone: "zone-a", cpu: "1"}, {zone: "zone-b", cpu: "3"}, {cpu: "8", controlPlane: true}},
			want:  map[string]float64{"zone-a": 0.25, "zone-b": 0.75},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, zoneRatios(nodeInfosOf(tc.nodes))); diff != "" {
				t.Errorf("zone ratios (-want +got):\n%s", diff)
			}
		})
	}
}

// hintEndpoint is a ready (unless notReady) endpoint in zone.
type hintEndpoint struct {
	addr     string
	zone     string // "" for none
	notReady bool
	noReady  bool // Ready condition left unset
}

func (e hintEndpoint) obj() discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{e.addr}}
	if e.zone != "" {
		ep.Zone = ptr.To(e.zone)
	}
	if !e.noReady {
		ep.Conditions.Ready = ptr.To(!e.notReady)
	}
	return ep
}

// hintDesired puts endpoints into one port group each per group index.
func hintDesired(groups ...[]hintEndpoint) desiredEndpoints {
	d := desiredEndpoints{}
	for i, g := range groups {
		pg := &portGroup{endpoints: map[string]discoveryv1.Endpoint{}}
		for j, e := range g {
			pg.endpoints[fmt.Sprintf("%02d-%s", j, e.addr)] = e.obj()
		}
		d[fmt.Sprintf("group-%d", i)] = pg
	}
	return d
}

// hintsByAddress lists each endpoint's zone hints by address.
func hintsByAddress(d desiredEndpoints) map[string]string {
	out := map[string]string{}
	for _, g := range d {
		for _, ep := range g.endpoints {
			var zones []string
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					zones = append(zones, z.Name)
				}
			}
			out[ep.Addresses[0]+"/"+ptr.Deref(ep.Zone, "")] += strings.Join(zones, ",")
		}
	}
	return out
}

// hintsPerZone counts the zone hints of ready endpoints.
func hintsPerZone(d desiredEndpoints) map[string]int {
	out := map[string]int{}
	for _, g := range d {
		for _, ep := range g.endpoints {
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					out[z.Name]++
				}
			}
		}
	}
	return out
}

var autoService = builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").
	Annotation(AnnotationTopologyMode, "Auto").Obj()

// TestAutoHintsUpstreamCases re-expresses upstream's TestAddHints
// (topologycache) with its zone ratios: the hint of every endpoint (the
// address, its zone, then the hinted zones) and the Event.
func TestAutoHintsUpstreamCases(t *testing.T) {
	tests := map[string]struct {
		ratios    map[string]float64
		endpoints [][]hintEndpoint
		want      map[string]string
		wantEvent hintEvent
	}{
		"empty": {
			wantEvent: hintEvent{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, msgInsufficientNodeInfo + ", addressType: IPv4"},
			want:      map[string]string{},
		},
		"slice to create, no zone ratios": {
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}}},
			want:      map[string]string{"10.1.2.3/zone-a": ""},
			wantEvent: hintEvent{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, msgInsufficientNodeInfo + ", addressType: IPv4"},
		},
		"slice to create with 2 endpoints, zone ratios require 3": {
			ratios:    map[string]float64{"zone-a": 0.3, "zone-b": 0.4, "zone-c": 0.3},
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}}},
			want:      map[string]string{"10.1.2.3/zone-a": "", "10.1.2.4/zone-b": ""},
			wantEvent: hintEvent{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled,
				msgInsufficientNumberOfEndpoints + " (2 endpoints, 3 zones), addressType: IPv4"},
		},
		"slice to create with 2 endpoints, zone ratios only require 2": {
			ratios:    map[string]float64{"zone-a": 0.45, "zone-b": 0.55},
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}}},
			want:      map[string]string{"10.1.2.3/zone-a": "zone-a", "10.1.2.4/zone-b": "zone-b"},
			wantEvent: hintEvent{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, msgTopologyAwareHintsEnabled + ", addressType: IPv4"},
		},
		"slice to create with 2 ready, 1 unready, 1 unknown endpoints, zone ratios only require 2": {
			ratios: map[string]float64{"zone-a": 0.45, "zone-b": 0.55},
			endpoints: [][]hintEndpoint{{
				{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"},
				{addr: "10.1.2.5", zone: "zone-b", notReady: true}, {addr: "10.1.2.6", zone: "zone-b", noReady: true},
			}},
			want:      map[string]string{"10.1.2.3/zone-a": "zone-a", "10.1.2.4/zone-b": "zone-b", "10.1.2.5/zone-b": "", "10.1.2.6/zone-b": ""},
			wantEvent: hintEvent{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, msgTopologyAwareHintsEnabled + ", addressType: IPv4"},
		},
		// Upstream moves one of zone-a's four endpoints to zone-b; which
		// one depends on slice order there, on endpoint order here.
		"slices to create and update within 3 zone threshold": {
			ratios: map[string]float64{"zone-a": 0.35, "zone-b": 0.35, "zone-c": 0.30},
			endpoints: [][]hintEndpoint{
				{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}},
				{{addr: "10.1.3.3", zone: "zone-c"}, {addr: "10.1.3.4", zone: "zone-c"}, {addr: "10.1.3.5", zone: "zone-a"}},
				{{addr: "10.2.2.3", zone: "zone-a"}, {addr: "10.2.2.4", zone: "zone-a"}},
				{{addr: "10.2.3.3", zone: "zone-b"}, {addr: "10.2.3.4", zone: "zone-c"}, {addr: "10.2.3.5", zone: "zone-a"}},
			},
			want: map[string]string{
				"10.1.2.3/zone-a": "zone-b", "10.1.2.4/zone-b": "zone-b",
				"10.1.3.3/zone-c": "zone-c", "10.1.3.4/zone-c": "zone-c", "10.1.3.5/zone-a": "zone-a",
				"10.2.2.3/zone-a": "zone-a", "10.2.2.4/zone-a": "zone-a",
				"10.2.3.3/zone-b": "zone-b", "10.2.3.4/zone-c": "zone-c", "10.2.3.5/zone-a": "zone-a",
			},
			wantEvent: hintEvent{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, msgTopologyAwareHintsEnabled + ", addressType: IPv4"},
		},
		// Beyond upstream's table, from its code:
		"a ready endpoint without a zone": {
			ratios:    map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}, {addr: "10.1.2.5", zone: "zone-b"}, {addr: "10.1.2.6"}}},
			want:      map[string]string{"10.1.2.3/zone-a": "", "10.1.2.4/zone-b": "", "10.1.2.5/zone-b": "", "10.1.2.6/": ""},
			wantEvent: hintEvent{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, msgNoZoneSpecified + ", addressType: IPv4"},
		},
		"issue 48: 50/25/25 % of the CPU and three endpoints overload the big zone": {
			ratios:    map[string]float64{"zone-a": 0.5, "zone-b": 0.25, "zone-c": 0.25},
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}, {addr: "10.1.2.5", zone: "zone-c"}}},
			want:      map[string]string{"10.1.2.3/zone-a": "", "10.1.2.4/zone-b": "", "10.1.2.5/zone-c": ""},
			wantEvent: hintEvent{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled,
				msgMinAllocationExceedsOverloadThreshold + " (3 endpoints, 3 zones), addressType: IPv4"},
		},
		"an endpoint in a zone without a share keeps its own zone, as upstream": {
			ratios:    map[string]float64{"zone-a": 0.5, "zone-b": 0.5},
			endpoints: [][]hintEndpoint{{{addr: "10.1.2.3", zone: "zone-a"}, {addr: "10.1.2.4", zone: "zone-b"}, {addr: "10.1.2.5", zone: "zone-b"}, {addr: "10.1.2.6", zone: "zone-x"}}},
			want:      map[string]string{"10.1.2.3/zone-a": "zone-a", "10.1.2.4/zone-b": "zone-b", "10.1.2.5/zone-b": "zone-b", "10.1.2.6/zone-x": "zone-x"},
			wantEvent: hintEvent{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, msgTopologyAwareHintsEnabled + ", addressType: IPv4"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := hintDesired(tc.endpoints...)
			res := applyHints(autoService, d, tc.ratios)
			if diff := cmp.Diff(tc.want, hintsByAddress(d)); diff != "" {
				t.Errorf("hints (-want +got):\n%s", diff)
			}
			evs := newHintTracker().observe(types.NamespacedName{Namespace: "ns", Name: "web"}, discoveryv1.AddressTypeIPv4, res)
			if diff := cmp.Diff([]hintEvent{tc.wantEvent}, evs, cmp.AllowUnexported(hintEvent{})); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGivingAndReceivingZones re-expresses upstream's
// Test_getGivingAndReceivingZones.
func TestGivingAndReceivingZones(t *testing.T) {
	desired := func(a, b, c float64) map[string]allocation {
		return map[string]allocation{"zone-a": {desired: a}, "zone-b": {desired: b}, "zone-c": {desired: c}}
	}
	tests := map[string]struct {
		allocations              map[string]allocation
		allocated                map[string]int
		wantGiving, wantReceived map[string]int
	}{
		"empty": {allocations: map[string]allocation{}, allocated: map[string]int{}},
		"simple allocation with no need for rebalancing": {
			allocations: desired(1.2, 1.1, 1.0), allocated: map[string]int{"zone-a": 1, "zone-b": 1, "zone-c": 1},
		},
		"preference for same zone even when giving an extra endpoint would result in slightly better distribution": {
			allocations: desired(5.1, 5.1, 5.8), allocated: map[string]int{"zone-a": 16},
			wantGiving: map[string]int{"zone-a": 10}, wantReceived: map[string]int{"zone-b": 5, "zone-c": 5},
		},
		"when 2 zones need < 1 endpoint, give to zone that needs endpoint most": {
			allocations: desired(5.0, 5.6, 5.4), allocated: map[string]int{"zone-a": 16},
			wantGiving: map[string]int{"zone-a": 11}, wantReceived: map[string]int{"zone-b": 6, "zone-c": 5},
		},
		"when 2 zones have extra endpoints, give from zone with most extra": {
			allocations: desired(5.0, 5.6, 5.4), allocated: map[string]int{"zone-b": 8, "zone-c": 8},
			wantGiving: map[string]int{"zone-b": 2, "zone-c": 3}, wantReceived: map[string]int{"zone-a": 5},
		},
		"ensure function can handle unexpected data (more allocated than allocations)": {
			allocations: desired(5, 5, 5), allocated: map[string]int{"zone-a": 6, "zone-b": 6, "zone-c": 6},
		},
		"ensure function can handle unexpected data (negative allocations)": {
			allocations: desired(-5, -5, -5), allocated: map[string]int{"zone-a": 6, "zone-b": 6, "zone-c": 6},
		},
		"ensure function can handle unexpected data (negative allocated)": {
			allocations: desired(5, 5, 5), allocated: map[string]int{"zone-a": -4, "zone-b": -3, "zone-c": -2},
		},
		"ensure function can handle unexpected data (negative for 1 zone)": {
			allocations: desired(5, 5, 5), allocated: map[string]int{"zone-a": -40, "zone-b": 20, "zone-c": 20},
			wantGiving: map[string]int{"zone-b": 15, "zone-c": 15}, wantReceived: map[string]int{"zone-a": 30},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			giving, receiving := givingAndReceivingZones(tc.allocations, tc.allocated)
			if diff := cmp.Diff(orEmpty(tc.wantGiving), giving); diff != "" {
				t.Errorf("giving zones (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(orEmpty(tc.wantReceived), receiving); diff != "" {
				t.Errorf("receiving zones (-want +got):\n%s", diff)
			}
		})
	}
}

func orEmpty(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

// TestHintPrecedence: the annotations win over trafficDistribution, and the
// deprecated annotation over topology-mode, as upstream.
func TestHintPrecedence(t *testing.T) {
	svc := func(annotations map[string]string, td string) *corev1.Service {
		b := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web")
		for k, v := range annotations {
			b = b.Annotation(k, v)
		}
		s := b.Obj()
		if td != "" {
			s.Spec.TrafficDistribution = ptr.To(td)
		}
		return s
	}
	tests := map[string]struct {
		svc  *corev1.Service
		want hintMode
	}{
		"topology-mode Auto over PreferClose": {
			svc: svc(map[string]string{corev1.AnnotationTopologyMode: "Auto"}, corev1.ServiceTrafficDistributionPreferClose), want: hintsAuto,
		},
		"deprecated annotation auto over PreferSameNode": {
			svc: svc(map[string]string{corev1.DeprecatedAnnotationTopologyAwareHints: "auto"}, corev1.ServiceTrafficDistributionPreferSameNode), want: hintsAuto,
		},
		"deprecated annotation Disabled decides over topology-mode Auto": {
			svc: svc(map[string]string{corev1.DeprecatedAnnotationTopologyAwareHints: "Disabled", corev1.AnnotationTopologyMode: "Auto"},
				corev1.ServiceTrafficDistributionPreferClose), want: hintsClose,
		},
		"topology-mode other than Auto leaves trafficDistribution": {
			svc: svc(map[string]string{corev1.AnnotationTopologyMode: "Disabled"}, corev1.ServiceTrafficDistributionPreferSameZone), want: hintsClose,
		},
		"nothing":                     {svc: svc(nil, ""), want: hintsNone},
		"unknown trafficDistribution": {svc: svc(nil, "Elsewhere"), want: hintsNone},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := hintModeOf(tc.svc); got != tc.want {
				t.Errorf("hintModeOf = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestHintTrackerEvents: Enabled once when hints appear, Disabled with the
// reason at every sync that cannot write them, and Disabled when the
// annotation goes, as upstream's reconciler says them.
func TestHintTrackerEvents(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	tr := newHintTracker()
	steps := []struct {
		res  hintResult
		want []hintEvent
	}{
		{hintResult{}, nil},
		{hintResult{auto: true}, []hintEvent{{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, "Topology Aware Hints has been enabled, addressType: IPv6"}}},
		{hintResult{auto: true}, nil},
		{hintResult{}, []hintEvent{{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, "Topology Aware Hints has been disabled, addressType: IPv6"}}},
		{hintResult{}, nil},
		{hintResult{auto: true, disabled: msgNoZoneSpecified}, []hintEvent{{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, "One or more endpoints do not have a zone specified, addressType: IPv6"}}},
		{hintResult{auto: true, disabled: msgNoZoneSpecified}, []hintEvent{{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, "One or more endpoints do not have a zone specified, addressType: IPv6"}}},
		{hintResult{}, nil},
	}
	for i, s := range steps {
		got := tr.observe(key, discoveryv1.AddressTypeIPv6, s.res)
		if diff := cmp.Diff(s.want, got, cmp.AllowUnexported(hintEvent{})); diff != "" {
			t.Errorf("step %d: events (-want +got):\n%s", i, diff)
		}
	}
}

// TestAutoHintsAgainstUpstream is a property test: over random zone, CPU
// and endpoint layouts, svcnet's hints (per zone) and Events are ones that
// upstream's topologycache, called directly, gives for the same Nodes and
// endpoints. Upstream breaks ties between zones in map order, so svcnet's
// outcome must be one of upstream's, not its only one.
func TestAutoHintsAgainstUpstream(t *testing.T) {
	// Upstream runs until it gives svcnet's outcome, at most maxUpstreamRuns
	// times: an outcome that needs several ties broken one way can be rare.
	const layouts, maxUpstreamRuns = 2000, 2000
	rng := rand.New(rand.NewPCG(48, 1))
	enabled := 0
	for i := range layouts {
		nodes, endpoints := randomLayout(rng)
		d := hintDesired(endpoints)
		res := applyHints(autoService, d, zoneRatios(nodeInfosOf(nodes)))
		got := outcome{perZone: fmt.Sprint(hintsPerZone(d))}
		for _, ev := range newHintTracker().observe(types.NamespacedName{Namespace: "ns", Name: "web"}, discoveryv1.AddressTypeIPv4, res) {
			got.events = append(got.events, ev.eventType+" "+ev.reason+" "+ev.message)
		}
		if res.disabled == "" {
			enabled++
		}
		seen := map[string]bool{}
		for run := 0; run < maxUpstreamRuns && !seen[got.String()]; run++ {
			seen[upstreamOutcome(nodes, endpoints).String()] = true
		}
		if !seen[got.String()] {
			t.Errorf("layout %d: nodes %+v endpoints %+v\nsvcnet: %s\nupstream: %v", i, nodes, endpoints, got, slices.Sorted(maps.Keys(seen)))
		}
	}
	// The layouts must exercise both outcomes for the test to mean much.
	if enabled < layouts/10 || enabled > layouts*9/10 {
		t.Errorf("%d of %d layouts got hints: the generator needs retuning", enabled, layouts)
	}
}

type outcome struct {
	perZone string
	events  []string
}

func (o outcome) String() string { return o.perZone + " " + strings.Join(o.events, "; ") }

// randomLayout draws 2-4 zones of 1-3 Nodes with uneven CPU, now and then a
// Node that is not ready, a control-plane Node, a Node without a zone or
// CPU, and 0-24 endpoints spread unevenly, some not ready, now and then one
// without a zone or in a zone without Nodes.
func randomLayout(rng *rand.Rand) ([]testNode, []hintEndpoint) {
	zones := []string{"zone-a", "zone-b", "zone-c", "zone-d"}[:2+rng.IntN(3)]
	var nodes []testNode
	for _, z := range zones {
		for range 1 + rng.IntN(3) {
			nodes = append(nodes, testNode{zone: z, cpu: fmt.Sprintf("%dm", 500*(1+rng.IntN(8))), notReady: rng.IntN(10) == 0})
		}
	}
	switch rng.IntN(20) {
	case 0:
		nodes = append(nodes, testNode{cpu: "2"})
	case 1:
		nodes = append(nodes, testNode{zone: zones[0]})
	case 2:
		nodes = append(nodes, testNode{zone: "zone-cp", cpu: "4", controlPlane: true})
	}
	weights := make([]int, len(zones))
	for i := range weights {
		weights[i] = rng.IntN(5)
	}
	var endpoints []hintEndpoint
	for i := range rng.IntN(25) {
		e := hintEndpoint{addr: fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), zone: zones[weighted(rng, weights)], notReady: rng.IntN(8) == 0}
		switch rng.IntN(40) {
		case 0:
			e.zone = ""
		case 1:
			e.zone = "zone-cp"
		}
		endpoints = append(endpoints, e)
	}
	return nodes, endpoints
}

func weighted(rng *rand.Rand, weights []int) int {
	total := 0
	for _, w := range weights {
		total += w + 1
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w+1 {
			return i
		}
		n -= w + 1
	}
	return len(weights) - 1
}

// upstreamOutcome runs k8s.io/endpointslice's topologycache on a fresh
// cache, as kube-controller-manager does for a Service's first sync.
func upstreamOutcome(nodes []testNode, endpoints []hintEndpoint) outcome {
	cache := topologycache.NewTopologyCache()
	var objs []*corev1.Node
	for i, n := range nodes {
		objs = append(objs, n.obj(fmt.Sprintf("node-%d", i)))
	}
	cache.SetNodes(logr.Discard(), objs)
	slice := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4}
	for _, e := range endpoints {
		slice.Endpoints = append(slice.Endpoints, e.obj())
	}
	si := &topologycache.SliceInfo{ServiceKey: "ns/web", AddressType: discoveryv1.AddressTypeIPv4, ToCreate: []*discoveryv1.EndpointSlice{slice}}
	toCreate, _, evs := cache.AddHints(logr.Discard(), si)
	perZone := map[string]int{}
	for _, s := range toCreate {
		for _, ep := range s.Endpoints {
			if ep.Hints != nil && endpointReady(&ep) {
				for _, z := range ep.Hints.ForZones {
					perZone[z.Name]++
				}
			}
		}
	}
	o := outcome{perZone: fmt.Sprint(perZone)}
	for _, ev := range evs {
		o.events = append(o.events, ev.EventType+" "+ev.Reason+" "+ev.Message)
	}
	return o
}
