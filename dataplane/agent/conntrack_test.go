// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

func TestStaleUDPFlows(t *testing.T) {
	ap := netip.MustParseAddrPort
	dests := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("192.168.240.1")}
	m := newStaleUDPFlows(
		// A deleted Service's endpoint.
		[]udpPort{{dests: []netip.Addr{netip.MustParseAddr("10.96.0.99")}, port: 53, nodePort: 30099,
			endpoints: map[netip.AddrPort]bool{ap("10.244.1.9:5353"): true}}},
		[]udpPort{
			// 10.244.1.5 moved from target port 5353 to 5354; 10.244.2.7
			// terminates but still serves, so it is among the endpoints.
			{dests: dests, port: 53, nodePort: 30053,
				endpoints: map[netip.AddrPort]bool{ap("10.244.1.5:5354"): true, ap("10.244.2.7:5353"): true}},
			// A node port without serving endpoints.
			{dests: []netip.Addr{netip.MustParseAddr("10.96.0.20")}, port: 53, nodePort: 30020, endpoints: map[netip.AddrPort]bool{}},
		})
	flow := func(proto uint8, dst string, replySrc string) *netlink.ConntrackFlow {
		d, r := ap(dst), ap(replySrc)
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("172.30.0.100"), SrcPort: 40000, DstIP: d.Addr().AsSlice(), DstPort: d.Port()},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: r.Addr().AsSlice(), SrcPort: r.Port()},
		}
	}
	for name, tc := range map[string]struct {
		flow *netlink.ConntrackFlow
		want bool
	}{
		"to the cluster IP, answered on the Pod's old target port":     {flow(unix.IPPROTO_UDP, "10.96.0.10:53", "10.244.1.5:5353"), true},
		"to the cluster IP, answered on the Pod's new target port":     {flow(unix.IPPROTO_UDP, "10.96.0.10:53", "10.244.1.5:5354"), false},
		"to the node port, answered on the Pod's old target port":      {flow(unix.IPPROTO_UDP, "172.30.0.11:30053", "10.244.1.5:5353"), true},
		"to the node port, answered on the Pod's new target port":      {flow(unix.IPPROTO_UDP, "172.30.0.11:30053", "10.244.1.5:5354"), false},
		"to the LoadBalancer IP, answered by a terminating endpoint":   {flow(unix.IPPROTO_UDP, "192.168.240.1:53", "10.244.2.7:5353"), false},
		"to the service, never DNATed":                                 {flow(unix.IPPROTO_UDP, "10.96.0.10:53", "10.96.0.10:53"), true},
		"to the service, DNATed to an unknown endpoint":                {flow(unix.IPPROTO_UDP, "192.168.240.1:53", "10.244.9.9:5353"), true},
		"TCP to the same addresses":                                    {flow(unix.IPPROTO_TCP, "10.96.0.10:53", "10.244.1.5:5353"), false},
		"to another port of the service address":                       {flow(unix.IPPROTO_UDP, "10.96.0.10:5353", "10.96.0.10:5353"), false},
		"to another address":                                           {flow(unix.IPPROTO_UDP, "10.96.0.11:53", "10.244.1.5:5353"), false},
		"to a node port without serving endpoints":                     {flow(unix.IPPROTO_UDP, "172.30.0.11:30020", "172.30.0.11:30020"), false},
		"to the deleted Service, answered by its endpoint":             {flow(unix.IPPROTO_UDP, "10.96.0.99:53", "10.244.1.9:5353"), true},
		"to the deleted Service's node port, answered by its endpoint": {flow(unix.IPPROTO_UDP, "172.30.0.11:30099", "10.244.1.9:5353"), true},
		"to the deleted Service, answered by another address":          {flow(unix.IPPROTO_UDP, "10.96.0.99:53", "10.244.1.8:5353"), false},
	} {
		if got := m.MatchConntrackFlow(tc.flow); got != tc.want {
			t.Errorf("%s: matched %t, want %t", name, got, tc.want)
		}
	}
}

// TestStaleUDPEndpointsFollowTargetPortsAndServing renders a UDP Service
// through a rollout and checks which endpoints become stale: one whose
// target port changes on the same Pod does, one that terminates while it
// still serves does not until it stops serving.
func TestStaleUDPEndpointsFollowTargetPortsAndServing(t *testing.T) {
	a, _ := testAgent(t, newFakeClient())
	dns := svc("dns", "10.96.0.10", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)}}
	})
	slice := func(port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "dns-1", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "dns"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolUDP)}},
			Endpoints:   eps,
		}
	}
	ep := func(ip string, ready, serving, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To("node-b"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}}
	}
	node := model.Node{Name: "node-a"}
	stale := func() []string {
		var out []string
		for _, u := range a.staleUDP {
			for e := range u.endpoints {
				out = append(out, e.String())
			}
		}
		slices.Sort(out)
		a.staleUDP = nil
		return out
	}
	steps := []struct {
		what  string
		slice *discoveryv1.EndpointSlice
		stale []string
	}{
		{"two ready Pods", slice(5353, ep("10.244.1.5", true, true, false), ep("10.244.2.7", true, true, false)), nil},
		{"one terminates, still serving", slice(5353, ep("10.244.1.5", true, true, false), ep("10.244.2.7", false, true, true)), nil},
		{"it stops serving", slice(5353, ep("10.244.1.5", true, true, false), ep("10.244.2.7", false, false, true)), []string{"10.244.2.7:5353"}},
		{"the target port changes on the same Pod", slice(5354, ep("10.244.1.5", true, true, false)), []string{"10.244.1.5:5353"}},
	}
	for _, step := range steps {
		a.renderService(client.ObjectKeyFromObject(dns), node, dns, []*discoveryv1.EndpointSlice{step.slice})
		if got := stale(); !slices.Equal(got, step.stale) {
			t.Errorf("%s: stale endpoints %v, want %v", step.what, got, step.stale)
		}
	}
	if got, want := a.currentUDP()[0].endpoints, map[netip.AddrPort]bool{netip.MustParseAddrPort("10.244.1.5:5354"): true}; !maps.Equal(got, want) {
		t.Errorf("current endpoints %v, want %v", got, want)
	}
}
