package iptables

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/test/builder"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestChainNamesMatchKubeProxy(t *testing.T) {
	// Every cluster with kube-dns has this chain; the hash is kube-proxy's.
	if got := svcChain("kube-system/kube-dns:dns", corev1.ProtocolUDP); got != "KUBE-SVC-TCOU7JCQXEZGVUNU" {
		t.Errorf("svcChain(kube-dns) = %s, want KUBE-SVC-TCOU7JCQXEZGVUNU", got)
	}
	if got := svcChain("kube-system/kube-dns:dns-tcp", corev1.ProtocolTCP); got != "KUBE-SVC-ERIFXISQEP7F7OF4" {
		t.Errorf("svcChain(kube-dns tcp) = %s, want KUBE-SVC-ERIFXISQEP7F7OF4", got)
	}
	if got := ServiceChain("kube-system", "kube-dns", "dns", corev1.ProtocolUDP); got != "KUBE-SVC-TCOU7JCQXEZGVUNU" {
		t.Errorf("ServiceChain(kube-dns) = %s, want KUBE-SVC-TCOU7JCQXEZGVUNU", got)
	}
	// The default/kubernetes Service's port is named https.
	if got := ServiceChain("default", "kubernetes", "https", corev1.ProtocolTCP); got != "KUBE-SVC-NPX46M4PTMTKRN6Y" {
		t.Errorf("ServiceChain(kubernetes) = %s, want KUBE-SVC-NPX46M4PTMTKRN6Y", got)
	}
	if got, want := ServiceChain("demo", "web", "", corev1.ProtocolTCP), svcChain("demo/web", corev1.ProtocolTCP); got != want {
		t.Errorf("ServiceChain of an unnamed port = %s, want %s", got, want)
	}
	// The endpoint chain kube-proxy's own tests name for ns1/svc1:p80.
	if got := EndpointChain("ns1", "svc1", "p80", corev1.ProtocolTCP, "10.180.0.1:80"); got != "KUBE-SEP-SXIVWICOYRO3J4NJ" {
		t.Errorf("EndpointChain(ns1/svc1:p80, 10.180.0.1:80) = %s, want KUBE-SEP-SXIVWICOYRO3J4NJ", got)
	}
}

func TestEndpointJumps(t *testing.T) {
	save := []byte(`*nat
:KUBE-SVC-A - [0:0]
:KUBE-SVC-AB - [0:0]
:KUBE-SVC-EMPTY - [0:0]
-A KUBE-SVC-A ! -s 10.244.0.0/16 -d 10.96.0.10/32 -j KUBE-MARK-MASQ
-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-X
-A KUBE-SVC-A -j KUBE-SEP-Y
-A KUBE-SVC-AB -j KUBE-SEP-Z
COMMIT
`)
	for chain, want := range map[string]int{"KUBE-SVC-A": 2, "KUBE-SVC-AB": 1, "KUBE-SVC-EMPTY": 0, "KUBE-SVC-GONE": -1} {
		if got := EndpointJumps(save, chain); got != want {
			t.Errorf("EndpointJumps(%s) = %d, want %d", chain, got, want)
		}
	}
}

const node = "node-a"

// ep is an endpoint for the slice builder.
type ep struct {
	ip          string
	node        string
	ready       bool
	serving     bool
	terminating bool
	zoneHint    string
}

func slice(svc, ns string, family discoveryv1.AddressType, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-abc", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating)},
			NodeName:   ptr.To(e.node),
		}
		if e.zoneHint != "" {
			x.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: e.zoneHint}}}
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func ready(ip, node string) ep { return ep{ip: ip, node: node, ready: true, serving: true} }

func web(mutate func(*corev1.Service)) *corev1.Service {
	s := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").Obj()
	s.Spec.ClusterIP = "10.96.0.10"
	s.Spec.ClusterIPs = []string{"10.96.0.10"}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func TestRenderGolden(t *testing.T) {
	three := slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.2", node), ready("10.244.2.2", "node-b"), ready("10.244.3.2", "node-c"))
	cfg := Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	cases := map[string]struct {
		services []*corev1.Service
		slices   []*discoveryv1.EndpointSlice
		family   corev1.IPFamily
		zone     string
		cfg      *Config
	}{
		"clusterip": {services: []*corev1.Service{web(nil)}, slices: []*discoveryv1.EndpointSlice{three}},
		"no-endpoints": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		})}},
		"nodeport": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		})}, slices: []*discoveryv1.EndpointSlice{three}},
		"nodeport-addresses": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 30080
		})}, slices: []*discoveryv1.EndpointSlice{three}, cfg: &Config{
			ClusterCIDRs: cfg.ClusterCIDRs, NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
		}},
		"loadbalancer-local-sourceranges": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.HealthCheckNodePort = 32000
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		})}, slices: []*discoveryv1.EndpointSlice{three}},
		"loadbalancer-local-no-local-endpoints": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		})}, slices: []*discoveryv1.EndpointSlice{slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.2.2", "node-b"))}},
		"externalips-affinity": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"192.0.2.20"}
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
		})}, slices: []*discoveryv1.EndpointSlice{three}},
		"internal-local": {services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		})}, slices: []*discoveryv1.EndpointSlice{three}},
		"terminating-fallback": {services: []*corev1.Service{web(nil)}, slices: []*discoveryv1.EndpointSlice{slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080,
			ep{ip: "10.244.1.2", node: node, serving: true, terminating: true},
			ep{ip: "10.244.2.2", node: "node-b", terminating: true},
		)}},
		"topology-hints": {zone: "zone-a", services: []*corev1.Service{web(nil)}, slices: []*discoveryv1.EndpointSlice{slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080,
			ep{ip: "10.244.1.2", node: node, ready: true, serving: true, zoneHint: "zone-a"},
			ep{ip: "10.244.2.2", node: "node-b", ready: true, serving: true, zoneHint: "zone-b"},
		)}},
		"masquerade-all": {services: []*corev1.Service{web(nil)}, slices: []*discoveryv1.EndpointSlice{three}, cfg: &Config{MasqueradeAll: true}},
		"ipv6": {family: corev1.IPv6Protocol, services: []*corev1.Service{web(func(s *corev1.Service) {
			s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		})}, slices: []*discoveryv1.EndpointSlice{three, slice("web", "ns", discoveryv1.AddressTypeIPv6, 8080, ready("fd00:244::2", node), ready("fd00:244::3", "node-b"))},
			cfg: &Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:244::/64")}}},
		"no-rules-for-headless-externalname-and-other-proxy": {services: []*corev1.Service{
			web(func(s *corev1.Service) {
				s.Spec.ClusterIP = corev1.ClusterIPNone
				s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
			}),
			builder.Service("ext", "ns").ExternalName("example.com").Obj(),
			web(func(s *corev1.Service) {
				s.Name = "other"
				s.Labels = map[string]string{model.LabelServiceProxyName: "someone-else"}
			}),
		}, slices: []*discoveryv1.EndpointSlice{three}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			family := tc.family
			if family == "" {
				family = corev1.IPv4Protocol
			}
			bySvc := map[string][]*discoveryv1.EndpointSlice{}
			for _, s := range tc.slices {
				k := s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName]
				bySvc[k] = append(bySvc[k], s)
			}
			m := model.Build(family, model.Node{Name: node, Zone: tc.zone}, tc.services, bySvc, model.Options{})
			c := cfg
			if tc.cfg != nil {
				c = *tc.cfg
			}
			got := string(Render(m, c).RestoreText(nil, nil))
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./dataplane/iptables -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProbabilities(t *testing.T) {
	var eps []ep
	for i := range 4 {
		eps = append(eps, ready(fmt.Sprintf("10.244.0.%d", i+1), node))
	}
	m := model.Build(corev1.IPv4Protocol, model.Node{Name: node}, []*corev1.Service{web(nil)},
		map[string][]*discoveryv1.EndpointSlice{"ns/web": {slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, eps...)}}, model.Options{})
	r := Render(m, Config{})
	var svc *Chain
	for _, c := range r.NAT {
		if c.Name == svcChain("ns/web:http", corev1.ProtocolTCP) {
			svc = c
		}
	}
	if svc == nil {
		t.Fatal("no KUBE-SVC chain rendered")
	}
	want := []string{"0.2500000000", "0.3333333333", "0.5000000000", ""}
	for i, rule := range svc.Rules {
		prob := ""
		if _, after, ok := cut(rule, "--probability "); ok {
			prob = after[:12]
		}
		if prob != want[i] {
			t.Errorf("rule %d probability %q, want %q: %s", i, prob, want[i], rule)
		}
	}
}

func cut(s, sep string) (string, string, bool) { // strings.Cut without the import churn
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
