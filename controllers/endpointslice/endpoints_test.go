// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/test/builder"
)

// epView is the part of an endpoint these tests look at.
type epView struct {
	Pod                       string
	Addr                      string
	Ready, Serving, Terminate bool
	Hostname, Zone            string
	Ports                     string
	HintZones, HintNodes      []string
}

func view(d desiredEndpoints) []epView {
	var out []epView
	for key, g := range d {
		for _, ep := range g.endpoints {
			v := epView{
				Pod: ep.TargetRef.Name, Addr: ep.Addresses[0],
				Ready: *ep.Conditions.Ready, Serving: *ep.Conditions.Serving, Terminate: *ep.Conditions.Terminating,
				Hostname: ptr.Deref(ep.Hostname, ""), Zone: ptr.Deref(ep.Zone, ""), Ports: key,
			}
			if ep.Hints != nil {
				for _, z := range ep.Hints.ForZones {
					v.HintZones = append(v.HintZones, z.Name)
				}
				for _, n := range ep.Hints.ForNodes {
					v.HintNodes = append(v.HintNodes, n.Name)
				}
			}
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b epView) int {
		if a.Pod < b.Pod {
			return -1
		}
		if a.Pod > b.Pod {
			return 1
		}
		return 0
	})
	return out
}

func TestComputeDesiredEndpoints(t *testing.T) {
	svc := builder.Service("web", "ns").Port("http", 80, intstr.FromString("http")).Selector("app", "web").Obj()
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	pod := func(name string) *builder.PodBuilder {
		return builder.Pod(name, "ns").Label("app", "web").ContainerPort("http", 8080).Node("n1")
	}
	deleting := pod("d").IP("10.1.0.4").Ready().Obj()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	sidecar := builder.Pod("s", "ns").Label("app", "web").IP("10.1.0.9").Ready().Obj()
	sidecar.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 15001}}}}
	nodes := map[string]nodeInfo{"n1": {zone: "z1"}}
	const http8080 = "http/TCP/8080/;"

	cases := map[string]struct {
		svc    func(*corev1.Service)
		pods   []*corev1.Pod
		family corev1.IPFamily
		want   []epView
	}{
		"ready, not ready, terminating": {
			pods: []*corev1.Pod{pod("a").IP("10.1.0.1").Ready().Obj(), pod("b").IP("10.1.0.2").NotReady().Obj(), deleting},
			want: []epView{
				{Pod: "a", Addr: "10.1.0.1", Ready: true, Serving: true, Zone: "z1", Ports: http8080},
				{Pod: "b", Addr: "10.1.0.2", Zone: "z1", Ports: http8080},
				{Pod: "d", Addr: "10.1.0.4", Serving: true, Terminate: true, Zone: "z1", Ports: http8080},
			},
		},
		"publishNotReadyAddresses makes every endpoint ready": {
			svc:  func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
			pods: []*corev1.Pod{pod("b").IP("10.1.0.2").NotReady().Obj(), deleting},
			want: []epView{
				{Pod: "b", Addr: "10.1.0.2", Ready: true, Zone: "z1", Ports: http8080},
				{Pod: "d", Addr: "10.1.0.4", Ready: true, Serving: true, Terminate: true, Zone: "z1", Ports: http8080},
			},
		},
		"no IP and terminal phases are left out": {
			pods: []*corev1.Pod{pod("a").Obj(), pod("f").IP("10.1.0.5").Phase(corev1.PodFailed).Obj(), pod("s").IP("10.1.0.6").Phase(corev1.PodSucceeded).Obj()},
		},
		"named port resolved per Pod, including sidecars": {
			pods: []*corev1.Pod{
				pod("a").IP("10.1.0.1").Ready().Obj(),
				builder.Pod("b", "ns").Label("app", "web").ContainerPort("http", 9090).IP("10.1.0.2").Ready().Obj(),
				builder.Pod("c", "ns").Label("app", "web").IP("10.1.0.3").Ready().Obj(), // no such port
				sidecar,
			},
			want: []epView{
				{Pod: "a", Addr: "10.1.0.1", Ready: true, Serving: true, Zone: "z1", Ports: http8080},
				{Pod: "b", Addr: "10.1.0.2", Ready: true, Serving: true, Ports: "http/TCP/9090/;"},
				{Pod: "c", Addr: "10.1.0.3", Ready: true, Serving: true, Ports: ""},
				{Pod: "s", Addr: "10.1.0.9", Ready: true, Serving: true, Ports: "http/TCP/15001/;"},
			},
		},
		"hostname only for the matching subdomain": {
			pods: []*corev1.Pod{pod("a").Hostname("a", "web").IP("10.1.0.1").Ready().Obj(), pod("b").Hostname("b", "other").IP("10.1.0.2").Ready().Obj()},
			want: []epView{
				{Pod: "a", Addr: "10.1.0.1", Ready: true, Serving: true, Hostname: "a", Zone: "z1", Ports: http8080},
				{Pod: "b", Addr: "10.1.0.2", Ready: true, Serving: true, Zone: "z1", Ports: http8080},
			},
		},
		"the IPv6 family takes the IPv6 address": {
			family: corev1.IPv6Protocol,
			pods:   []*corev1.Pod{pod("a").IP("10.1.0.1", "fd00::1").Ready().Obj(), pod("b").IP("10.1.0.2").Ready().Obj()},
			want:   []epView{{Pod: "a", Addr: "fd00::1", Ready: true, Serving: true, Zone: "z1", Ports: http8080}},
		},
		"PreferSameNode hints zone and node of ready endpoints": {
			svc: func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferSameNode)
			},
			pods: []*corev1.Pod{pod("a").IP("10.1.0.1").Ready().Obj(), pod("b").IP("10.1.0.2").NotReady().Obj()},
			want: []epView{
				{Pod: "a", Addr: "10.1.0.1", Ready: true, Serving: true, Zone: "z1", Ports: http8080, HintZones: []string{"z1"}, HintNodes: []string{"n1"}},
				{Pod: "b", Addr: "10.1.0.2", Zone: "z1", Ports: http8080},
			},
		},
		"PreferClose hints the zone only": {
			svc: func(s *corev1.Service) {
				s.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
			},
			pods: []*corev1.Pod{pod("a").IP("10.1.0.1").Ready().Obj()},
			want: []epView{{Pod: "a", Addr: "10.1.0.1", Ready: true, Serving: true, Zone: "z1", Ports: http8080, HintZones: []string{"z1"}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := svc.DeepCopy()
			if tc.svc != nil {
				tc.svc(s)
			}
			family := tc.family
			if family == "" {
				family = corev1.IPv4Protocol
			}
			d := computeDesiredEndpoints(s, tc.pods, nodes, family)
			applyHints(s, d, zoneRatios(nodes))
			if diff := cmp.Diff(tc.want, view(d)); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTopologyAutoHints(t *testing.T) {
	svc := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").
		Annotation(AnnotationTopologyMode, "Auto").Obj()
	cpu := func(n int64) nodeInfo { return nodeInfo{cpu: n * 1000, ready: true} }
	nodes := map[string]nodeInfo{"a1": cpu(4), "b1": cpu(2), "c1": cpu(2)}
	for name, z := range map[string]string{"a1": "a", "b1": "b", "c1": "c"} {
		n := nodes[name]
		n.zone = z
		nodes[name] = n
	}
	var pods []*corev1.Pod
	// 8 endpoints all in zone a: a has half the CPU, so 4 stay in a and
	// 2 each are lent to b and c.
	for i := range 8 {
		pods = append(pods, builder.Pod("p"+string(rune('0'+i)), "ns").Label("app", "web").Node("a1").IP("10.1.0."+string(rune('1'+i))).Ready().Obj())
	}
	d := computeDesiredEndpoints(svc, pods, nodes, corev1.IPv4Protocol)
	applyHints(svc, d, zoneRatios(nodes))
	perZone := map[string]int{}
	for _, v := range view(d) {
		if len(v.HintZones) != 1 {
			t.Fatalf("endpoint %s has hints %v, want one zone", v.Pod, v.HintZones)
		}
		perZone[v.HintZones[0]]++
	}
	if diff := cmp.Diff(map[string]int{"a": 4, "b": 2, "c": 2}, perZone); diff != "" {
		t.Errorf("hinted endpoints per zone (-want +got):\n%s", diff)
	}

	// Fewer endpoints than zones: no hints at all.
	d = computeDesiredEndpoints(svc, pods[:2], nodes, corev1.IPv4Protocol)
	applyHints(svc, d, zoneRatios(nodes))
	for _, v := range view(d) {
		if v.HintZones != nil {
			t.Errorf("endpoint %s has hints %v with fewer endpoints than zones", v.Pod, v.HintZones)
		}
	}
}
