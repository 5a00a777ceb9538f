// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package goldencases holds the Services and EndpointSlices every dataplane
// renders in its golden tests, one case per feature, so that the iptables
// and nftables modes are checked against the same inputs.
package goldencases

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/test/builder"
)

// Update is the -update flag of the golden tests.
var Update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// Node is the node the cases are rendered for.
const Node = "node-a"

// Case is one golden test's input.
type Case struct {
	Services []*corev1.Service
	Slices   []*discoveryv1.EndpointSlice
	Family   corev1.IPFamily
	Zone     string
	// ClusterCIDRs, MasqueradeAll and NodePortIPs are the node's settings.
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool
	NodePortIPs   []netip.Addr
	// NodeIPs are the node's primary addresses (its Node's InternalIPs).
	NodeIPs []netip.Addr
	// ServiceCIDRs are the ranges of the cluster's ServiceCIDRs.
	ServiceCIDRs []netip.Prefix
}

// Model builds the case's model.
func (c Case) Model() *model.Model {
	bySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, s := range c.Slices {
		k := types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}
		bySvc[k] = append(bySvc[k], s)
	}
	return model.Build(c.Family, model.Node{Name: Node, Zone: c.Zone, IPs: c.NodeIPs}, c.Services, bySvc, model.Options{})
}

// Check compares got with testdata/<name>.golden, rewriting it under
// -update.
func Check(t *testing.T, name, got, pkg string) {
	t.Helper()
	golden := filepath.Join("testdata", name+".golden")
	if *Update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./%s -update to create it)", err, pkg)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}
}

// Endpoint is an endpoint for Slice.
type Endpoint struct {
	IP          string
	Node        string
	Ready       bool
	Serving     bool
	Terminating bool
	ZoneHint    string
}

// Ready is a ready endpoint on a node.
func Ready(ip, node string) Endpoint { return Endpoint{IP: ip, Node: node, Ready: true, Serving: true} }

// Slice is an EndpointSlice of a Service with one port named http.
func Slice(svc, ns string, family discoveryv1.AddressType, port int32, eps ...Endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-abc", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{
			Addresses:  []string{e.IP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.Ready), Serving: ptr.To(e.Serving), Terminating: ptr.To(e.Terminating)},
			NodeName:   ptr.To(e.Node),
		}
		if e.ZoneHint != "" {
			x.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: e.ZoneHint}}}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

// Web is the ClusterIP Service ns/web (port http 80 -> 8080, cluster IP
// 10.96.0.10), changed by mutate.
func Web(mutate func(*corev1.Service)) *corev1.Service {
	s := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").Obj()
	s.Spec.ClusterIP = "10.96.0.10"
	s.Spec.ClusterIPs = []string{"10.96.0.10"}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func nodePort(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
}

func loadBalancerLocal(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeLoadBalancer
	s.Spec.Ports[0].NodePort = 30080
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
}

// Cases are the golden cases by name.
func Cases() map[string]Case {
	three := Slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, Ready("10.244.1.2", Node), Ready("10.244.2.2", "node-b"), Ready("10.244.3.2", "node-c"))
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	svcs := func(s ...*corev1.Service) []*corev1.Service { return s }
	slices := func(s ...*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice { return s }
	cases := map[string]Case{
		"clusterip":          {Services: svcs(Web(nil)), Slices: slices(three)},
		"no-endpoints":       {Services: svcs(Web(nodePort))},
		"nodeport":           {Services: svcs(Web(nodePort)), Slices: slices(three)},
		"nodeport-addresses": {Services: svcs(Web(nodePort)), Slices: slices(three), NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}},
		"loadbalancer-local-sourceranges": {Services: svcs(Web(func(s *corev1.Service) {
			loadBalancerLocal(s)
			s.Spec.HealthCheckNodePort = 32000
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
		})), Slices: slices(three)},
		// Pods and the node still reach the endpoints elsewhere through the
		// load balancer IP and the node port; only outside traffic is
		// dropped.
		"loadbalancer-local-no-local-endpoints": {Services: svcs(Web(loadBalancerLocal)),
			Slices: slices(Slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, Ready("10.244.2.2", "node-b")))},
		// Padded and legacy ranges are read as kube-proxy reads them; the
		// node's IP is in one, so its own traffic (from the load balancer
		// IP) is let through.
		"loadbalancer-sourceranges-padded-allow-node": {Services: svcs(Web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
			s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/24 ", "192.168.000.000/16"}
		})), Slices: slices(three), NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}},
		// nftables mode drops traffic to unallocated addresses of the
		// ServiceCIDRs; iptables mode does nothing with them (kube-proxy's
		// modes alike).
		"service-cidrs": {Services: svcs(Web(nil)), Slices: slices(three),
			ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.97.0.0/16")}},
		"externalips-affinity": {Services: svcs(Web(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"192.0.2.20"}
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
		})), Slices: slices(three)},
		"internal-local": {Services: svcs(Web(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		})), Slices: slices(three)},
		"terminating-fallback": {Services: svcs(Web(nil)), Slices: slices(Slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080,
			Endpoint{IP: "10.244.1.2", Node: Node, Serving: true, Terminating: true},
			Endpoint{IP: "10.244.2.2", Node: "node-b", Terminating: true},
		))},
		"topology-hints": {Zone: "zone-a", Services: svcs(Web(nil)), Slices: slices(Slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080,
			Endpoint{IP: "10.244.1.2", Node: Node, Ready: true, Serving: true, ZoneHint: "zone-a"},
			Endpoint{IP: "10.244.2.2", Node: "node-b", Ready: true, Serving: true, ZoneHint: "zone-b"},
		))},
		"masquerade-all": {Services: svcs(Web(nil)), Slices: slices(three), MasqueradeAll: true},
		"ipv6": {Family: corev1.IPv6Protocol, Services: svcs(Web(func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		})), Slices: slices(three, Slice("web", "ns", discoveryv1.AddressTypeIPv6, 8080, Ready("fd00:244::2", Node), Ready("fd00:244::3", "node-b"))),
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:244::/64")}},
		"no-rules-for-headless-externalname-and-other-proxy": {Services: svcs(
			Web(func(s *corev1.Service) {
				s.Spec.ClusterIP = corev1.ClusterIPNone
				s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
			}),
			builder.Service("ext", "ns").ExternalName("example.com").Obj(),
			Web(func(s *corev1.Service) {
				s.Name = "other"
				s.Labels = map[string]string{model.LabelServiceProxyName: "someone-else"}
			}),
		), Slices: slices(three)},
	}
	for name, c := range cases {
		if c.Family == "" {
			c.Family = corev1.IPv4Protocol
		}
		if c.ClusterCIDRs == nil && !c.MasqueradeAll {
			c.ClusterCIDRs = pods
		}
		cases[name] = c
	}
	return cases
}
