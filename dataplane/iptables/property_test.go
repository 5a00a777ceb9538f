// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// gen makes Services and EndpointSlices with every field the API accepts,
// and some it does not (a proxy still sees whatever a cache holds).
type gen struct{ r *rand.Rand }

func (g gen) pick(options ...string) string { return options[g.r.IntN(len(options))] }

func (g gen) ip() string {
	switch g.r.IntN(6) {
	case 0:
		return fmt.Sprintf("fd00::%x", g.r.IntN(0xffff))
	case 1:
		return g.pick("not-an-ip", "", "10.0.0.300", "::ffff:10.1.2.3", "0.0.0.0", "255.255.255.255")
	default:
		return fmt.Sprintf("10.%d.%d.%d", g.r.IntN(256), g.r.IntN(256), g.r.IntN(256))
	}
}

func (g gen) protocol() corev1.Protocol {
	return corev1.Protocol(g.pick("TCP", "UDP", "SCTP", "", "tcp"))
}

func (g gen) service(i int) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: g.pick("a", "b"), Name: fmt.Sprintf("s%d", i)}}
	spec := &svc.Spec
	spec.Type = corev1.ServiceType(g.pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", ""))
	switch g.r.IntN(5) {
	case 0:
		spec.ClusterIP, spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case 1:
		spec.ClusterIPs = []string{g.ip(), g.ip()}
		spec.ClusterIP = spec.ClusterIPs[0]
	default:
		spec.ClusterIP = g.ip()
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	for j := range g.r.IntN(6) {
		spec.Ports = append(spec.Ports, corev1.ServicePort{
			Name:       g.pick("", "http", "dns", "http", fmt.Sprintf("p%d", j)),
			Protocol:   g.protocol(),
			Port:       int32(g.r.IntN(65536)),
			TargetPort: intstr.FromInt32(int32(g.r.IntN(65536))),
			NodePort:   int32(g.r.IntN(3)) * int32(30000+g.r.IntN(2768)),
		})
	}
	for range g.r.IntN(3) {
		spec.ExternalIPs = append(spec.ExternalIPs, g.ip())
	}
	for range g.r.IntN(3) {
		spec.LoadBalancerSourceRanges = append(spec.LoadBalancerSourceRanges, g.pick("10.0.0.0/8", "fd00::/64", "garbage", "192.168.1.1/32", "0.0.0.0/0"))
	}
	for range g.r.IntN(3) {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: g.ip(), Hostname: g.pick("", "lb.example.com")})
	}
	if g.r.IntN(2) == 0 {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		spec.HealthCheckNodePort = int32(30000 + g.r.IntN(2768))
	}
	if g.r.IntN(3) == 0 {
		spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	}
	if g.r.IntN(3) == 0 {
		spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if g.r.IntN(2) == 0 {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(g.r.IntN(86401)))}}
		}
	}
	return svc
}

func (g gen) slice(svc *corev1.Service, i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%d", svc.Name, i), Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressType(g.pick("IPv4", "IPv4", "IPv6", "FQDN")),
	}
	for _, p := range svc.Spec.Ports {
		port := &discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(int32(g.r.IntN(65536)))}
		if g.r.IntN(8) == 0 {
			port.Port = nil
		}
		s.Ports = append(s.Ports, *port)
	}
	n := g.r.IntN(12)
	if g.r.IntN(20) == 0 {
		n = 1000
	}
	cond := func() *bool {
		if g.r.IntN(3) == 0 {
			return nil
		}
		return ptr.To(g.r.IntN(2) == 0)
	}
	for range n {
		ep := discoveryv1.Endpoint{
			Addresses:  []string{g.ip()},
			Conditions: discoveryv1.EndpointConditions{Ready: cond(), Serving: cond(), Terminating: cond()},
			NodeName:   ptr.To(g.pick("node-a", "node-b", "")),
		}
		if g.r.IntN(10) == 0 {
			ep.Addresses = nil
		}
		if g.r.IntN(4) == 0 {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: g.pick("z1", "z2")}}}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	if n > 0 && g.r.IntN(4) == 0 {
		s.Endpoints = append(s.Endpoints, s.Endpoints[0]) // a duplicate
	}
	return s
}

// reference is a well-formed Service whose rules must come out the same
// whatever else the node has.
func reference() (*corev1.Service, []*discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ref", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.7.7", ClusterIPs: []string{"10.96.7.7"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30777}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ref", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}
	return svc, []*discoveryv1.EndpointSlice{slice}
}

// referenceRules are the lines of a dump that belong to the reference
// Service: its chains' rules and the top-level rules naming it.
func referenceRules(dump string) []string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "ref/web") {
			out = append(out, l)
		}
	}
	return out
}

// checkNode renders the reference Service beside generated ones through
// the agent's path (model, backend, a fake kernel that validates every
// restore) and expects no panic, a restore that applies, and the
// reference's rules exactly as on a node without the others.
func checkNode(t *testing.T, seed uint64) (othersRules int) {
	t.Helper()
	g := gen{r: rand.New(rand.NewPCG(seed, seed^0x5eed))}
	ref, refSlices := reference()
	node := model.Node{Name: "node-a", Zone: "z1"}
	render := func(services map[*corev1.Service][]*discoveryv1.EndpointSlice) string {
		t.Helper()
		fake := NewFake()
		b := NewBackend(corev1.IPv4Protocol, fake, Config{ClusterCIDRs: nil})
		for svc, ss := range services {
			b.SetService(client.ObjectKeyFromObject(svc), model.BuildService(corev1.IPv4Protocol, node, svc, ss, model.Options{}))
		}
		if _, err := b.Sync(context.Background(), dataplane.Node{}); err != nil {
			t.Fatalf("seed %d: the restore of the rendered rules fails: %v", seed, err)
		}
		return fake.Dump()
	}
	alone := referenceRules(render(map[*corev1.Service][]*discoveryv1.EndpointSlice{ref: refSlices}))
	all := map[*corev1.Service][]*discoveryv1.EndpointSlice{ref: refSlices}
	for i := range 1 + g.r.IntN(8) {
		svc := g.service(i)
		var ss []*discoveryv1.EndpointSlice
		for j := range g.r.IntN(3) {
			ss = append(ss, g.slice(svc, j))
		}
		all[svc] = ss
	}
	dump := render(all)
	if diff := cmp.Diff(alone, referenceRules(dump)); diff != "" {
		t.Fatalf("seed %d: other Services changed the reference Service's rules (-alone +beside others):\n%s", seed, diff)
	}
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "-A KUBE-") && !strings.HasPrefix(l, "-A "+ChainCanary+" ") && !strings.Contains(l, "ref/web") {
			othersRules++
		}
	}
	return othersRules
}

// TestArbitraryServicesBreakNothing is the property over 300 generated
// nodes; FuzzArbitraryServices explores further under `go test -fuzz`.
func TestArbitraryServicesBreakNothing(t *testing.T) {
	programmed := 0
	for seed := range uint64(300) {
		if checkNode(t, seed) > 0 {
			programmed++
		}
	}
	// The generator must not only make Services the model drops.
	if programmed < 150 {
		t.Errorf("only %d of 300 generated nodes programmed any other Service's rules", programmed)
	}
}

func FuzzArbitraryServices(f *testing.F) {
	for _, seed := range []uint64{1, 42, 1 << 40} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { _ = checkNode(t, seed) })
}
