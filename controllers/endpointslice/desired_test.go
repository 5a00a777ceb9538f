// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var testService = &corev1.Service{
	ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: types.UID("svc-uid"), Labels: map[string]string{"team": "a"}},
	Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, ClusterIP: "10.96.0.10"},
}

var testPorts = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}

func testEndpoint(i int) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("pod-%d", i)},
	}
}

// desiredOf returns the desired endpoints with the given endpoint numbers.
func desiredOf(ids ...int) desiredEndpoints {
	g := &portGroup{ports: testPorts, endpoints: map[string]discoveryv1.Endpoint{}}
	for _, i := range ids {
		ep := testEndpoint(i)
		g.endpoints[endpointKey(ep)] = ep
	}
	return desiredEndpoints{portKey(testPorts): g}
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// existingSlice is a slice as this controller would have written it.
func existingSlice(name string, ids ...int) *discoveryv1.EndpointSlice {
	meta := newSliceMeta(testService, discoveryv1.AddressTypeIPv4)
	eps := make([]discoveryv1.Endpoint, 0, len(ids))
	for _, i := range ids {
		eps = append(eps, testEndpoint(i))
	}
	ports := testPorts
	if len(ids) == 0 {
		ports = nil
	}
	s := meta.newSlice(ports, eps)
	s.Name = name
	s.UID = types.UID(name + "-uid")
	return s
}

// planSummary describes a plan by slice sizes, which is what the packing
// tests are about.
type planSummary struct {
	Creates []int          // endpoints in each created slice
	Updates map[string]int // endpoints in each updated slice, by name
	Deletes []string
	Slices  int // slices after the plan
}

func summarize(p plan, existing int) planSummary {
	s := planSummary{Updates: map[string]int{}}
	for _, c := range p.create {
		s.Creates = append(s.Creates, len(c.Endpoints))
	}
	slices.Sort(s.Creates)
	for _, u := range p.update {
		s.Updates[u.Name] = len(u.Endpoints)
	}
	for _, d := range p.delete {
		s.Deletes = append(s.Deletes, d.Name)
	}
	slices.Sort(s.Deletes)
	s.Slices = existing + len(p.create) - len(p.delete)
	return s
}

func TestComputeDesiredSlices(t *testing.T) {
	cases := map[string]struct {
		desired  desiredEndpoints
		existing []*discoveryv1.EndpointSlice
		max      int
		want     planSummary
	}{
		"3 endpoints make one slice": {
			desired: desiredOf(span(0, 3)...), max: 100,
			want: planSummary{Creates: []int{3}, Updates: map[string]int{}, Slices: 1},
		},
		"250 endpoints make 3 slices of at most 100": {
			desired: desiredOf(span(0, 250)...), max: 100,
			want: planSummary{Creates: []int{50, 100, 100}, Updates: map[string]int{}, Slices: 3},
		},
		"3000 endpoints make 30 slices": {
			desired: desiredOf(span(0, 3000)...), max: 100,
			want: planSummary{Creates: slices.Repeat([]int{100}, 30), Updates: map[string]int{}, Slices: 30},
		},
		"no endpoints make one placeholder": {
			desired: desiredEndpoints{}, max: 100,
			want: planSummary{Creates: []int{0}, Updates: map[string]int{}, Slices: 1},
		},
		"an existing placeholder costs no write": {
			desired: desiredEndpoints{}, existing: []*discoveryv1.EndpointSlice{existingSlice("p")}, max: 100,
			want: planSummary{Updates: map[string]int{}, Slices: 1},
		},
		"the placeholder is reused for the first endpoints": {
			desired: desiredOf(0, 1, 2), existing: []*discoveryv1.EndpointSlice{existingSlice("p")}, max: 100,
			want: planSummary{Updates: map[string]int{"p": 3}, Slices: 1},
		},
		"unchanged slices are not written": {
			desired: desiredOf(span(0, 150)...), existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...), existingSlice("b", span(100, 150)...)}, max: 100,
			want: planSummary{Updates: map[string]int{}, Slices: 2},
		},
		"a replaced endpoint is updated in place": {
			desired:  desiredOf(append(span(1, 100), 500)...),
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...)}, max: 100,
			want: planSummary{Updates: map[string]int{"a": 100}, Slices: 1},
		},
		"new endpoints fill a slice that is written anyway": {
			desired:  desiredOf(append(span(1, 100), span(100, 130)...)...),
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...), existingSlice("b", span(100, 110)...)}, max: 100,
			// a lost endpoint 0 and is written; one new endpoint goes there,
			// the other 19 fit tightly in b.
			want: planSummary{Updates: map[string]int{"a": 100, "b": 29}, Slices: 2},
		},
		"the last partial batch goes into the tightest clean slice": {
			desired:  desiredOf(span(0, 240)...),
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...), existingSlice("b", span(100, 150)...), existingSlice("c", span(150, 210)...)}, max: 100,
			want: planSummary{Updates: map[string]int{"c": 90}, Slices: 3},
		},
		"one spare slice is kept rather than paying a delete to merge it": {
			desired:  desiredOf(span(0, 200)...),
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...), existingSlice("b", span(100, 150)...), existingSlice("c", span(150, 170)...)}, max: 100,
			want: planSummary{Updates: map[string]int{"b": 80}, Slices: 3},
		},
		"a scale-down merges half-empty slices": {
			// 1,000 -> 150: 15 endpoints left in each of 10 slices.
			desired: desiredOf(func() []int {
				var ids []int
				for s := range 10 {
					ids = append(ids, span(s*100, s*100+15)...)
				}
				return ids
			}()...),
			existing: func() []*discoveryv1.EndpointSlice {
				var out []*discoveryv1.EndpointSlice
				for s := range 10 {
					out = append(out, existingSlice(fmt.Sprintf("s%d", s), span(s*100, s*100+100)...))
				}
				return out
			}(), max: 100,
			want: planSummary{
				// ceil(150/100)+1 slices; s9 is written because it lost
				// endpoints anyway.
				Updates: map[string]int{"s1": 100, "s7": 35, "s9": 15},
				Deletes: []string{"s0", "s2", "s3", "s4", "s5", "s6", "s8"},
				Slices:  3,
			},
		},
		"a lowered maximum splits slices": {
			desired: desiredOf(span(0, 5)...), existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 5)...)}, max: 2,
			want: planSummary{Creates: []int{1, 2}, Updates: map[string]int{"a": 2}, Slices: 3},
		},
		"a slice emptied while another is created is rewritten instead": {
			desired:  desiredOf(span(200, 300)...),
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...)}, max: 100,
			want: planSummary{Updates: map[string]int{"a": 100}, Slices: 1},
		},
		"all endpoints gone leaves one placeholder": {
			desired:  desiredEndpoints{},
			existing: []*discoveryv1.EndpointSlice{existingSlice("a", span(0, 100)...), existingSlice("b", span(100, 120)...)}, max: 100,
			want: planSummary{Updates: map[string]int{"a": 0}, Deletes: []string{"b"}, Slices: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			meta := newSliceMeta(testService, discoveryv1.AddressTypeIPv4)
			p := computeDesiredSlices(meta, tc.desired, tc.existing, tc.max)
			if diff := cmp.Diff(tc.want, summarize(p, len(tc.existing))); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			checkPlanHoldsEndpoints(t, tc.desired, tc.existing, p, tc.max)
		})
	}
}

// checkPlanHoldsEndpoints verifies that after the plan every desired
// endpoint is published exactly once and no slice is over the maximum.
func checkPlanHoldsEndpoints(t *testing.T, desired desiredEndpoints, existing []*discoveryv1.EndpointSlice, p plan, maxPerSlice int) {
	t.Helper()
	after := map[string]*discoveryv1.EndpointSlice{}
	for _, s := range existing {
		after[s.Name] = s
	}
	for _, s := range p.update {
		after[s.Name] = s
	}
	for _, s := range p.delete {
		delete(after, s.Name)
	}
	all := slices.Collect(func(yield func(*discoveryv1.EndpointSlice) bool) {
		for _, s := range after {
			if !yield(s) {
				return
			}
		}
	})
	all = append(all, p.create...)
	seen := map[string]int{}
	for _, s := range all {
		if len(s.Endpoints) > maxPerSlice {
			t.Errorf("slice %q has %d endpoints, more than %d", s.Name, len(s.Endpoints), maxPerSlice)
		}
		for _, ep := range s.Endpoints {
			seen[endpointKey(ep)]++
		}
	}
	for _, g := range desired {
		for k := range g.endpoints {
			if seen[k] != 1 {
				t.Errorf("endpoint %s published %d times, want once", k, seen[k])
			}
			delete(seen, k)
		}
	}
	for k := range seen {
		t.Errorf("endpoint %s published but not desired", k)
	}
}

func TestSliceMetadata(t *testing.T) {
	svc := testService.DeepCopy()
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	svc.Labels[discoveryv1.LabelManagedBy] = "someone-else"
	p := computeDesiredSlices(newSliceMeta(svc, discoveryv1.AddressTypeIPv4), desiredOf(0), nil, 100)
	if len(p.create) != 1 {
		t.Fatalf("want one create, got %+v", p)
	}
	s := p.create[0]
	wantLabels := map[string]string{
		"team":                       "a",
		discoveryv1.LabelServiceName: "web",
		discoveryv1.LabelManagedBy:   ManagedBy,
		LabelHeadless:                "",
	}
	if diff := cmp.Diff(wantLabels, s.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	if diff := cmp.Diff(wantOwner, s.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	if s.GenerateName != "web-" || s.Namespace != "ns" || s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("got generateName %q namespace %q addressType %q", s.GenerateName, s.Namespace, s.AddressType)
	}

	// A label change on the Service rewrites every slice.
	existing := existingSlice("a", 0)
	svc2 := testService.DeepCopy()
	svc2.Labels["team"] = "b"
	p = computeDesiredSlices(newSliceMeta(svc2, discoveryv1.AddressTypeIPv4), desiredOf(0), []*discoveryv1.EndpointSlice{existing}, 100)
	if len(p.update) != 1 || p.update[0].Labels["team"] != "b" {
		t.Errorf("want the slice updated with team=b, got %+v", summarize(p, 1))
	}
}
