// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package model

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcnet-io/svcnet/test/builder"
)

func TestSourceRanges(t *testing.T) {
	for name, tc := range map[string]struct {
		ranges []string
		family corev1.IPFamily
		want   []netip.Prefix
	}{
		// API validation lets padding through; kube-proxy trims it.
		"padded": {ranges: []string{" 10.0.0.0/8 ", "\t192.168.1.0/24"}, family: corev1.IPv4Protocol,
			want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.0/24")}},
		// Objects written before strict validation may hold leading zeros
		// and host bits.
		"legacy forms": {ranges: []string{"010.001.0.0/16", "172.16.5.4/12"}, family: corev1.IPv4Protocol,
			want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("172.16.0.0/12")}},
		"the other family is left out": {ranges: []string{"10.0.0.0/8", " fd00::/64 "}, family: corev1.IPv6Protocol,
			want: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}},
		// A zero-length range allows any source: no firewall at all.
		"allow any": {ranges: []string{"10.0.0.0/8", " 0.0.0.0/0"}, family: corev1.IPv4Protocol},
		// What does not parse (the API never accepts it) is ignored, as
		// kube-proxy ignores it.
		"invalid ignored": {ranges: []string{"10.0.0.0/33", "nonsense", " 10.1.0.0/16"}, family: corev1.IPv4Protocol,
			want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, SourceRanges(tc.ranges, tc.family), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("SourceRanges(%q) (-want +got):\n%s", tc.ranges, diff)
			}
		})
	}
	if got, want := InvalidSourceRanges([]string{" 10.0.0.0/8 ", "", "nonsense"}), []string{"nonsense"}; !cmp.Equal(want, got) {
		t.Errorf("InvalidSourceRanges = %q, want %q", got, want)
	}
}

func TestAllowFromNode(t *testing.T) {
	lb := func(ranges ...string) *corev1.Service {
		s := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Obj()
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = ranges
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		return s
	}
	nodeIP := []netip.Addr{netip.MustParseAddr("192.168.0.10")}
	for name, tc := range map[string]struct {
		svc  *corev1.Service
		node Node
		want bool
	}{
		"node IP in a padded range":  {svc: lb(" 192.168.0.0/16 "), node: Node{Name: "a", IPs: nodeIP}, want: true},
		"node IP outside the ranges": {svc: lb("203.0.113.0/24"), node: Node{Name: "a", IPs: nodeIP}},
		// Without an address of the family kube-proxy takes the loopback.
		"no node IP: loopback": {svc: lb("127.0.0.0/8"), node: Node{Name: "a"}, want: true},
		"no ranges":            {svc: lb(), node: Node{Name: "a", IPs: nodeIP}},
	} {
		t.Run(name, func(t *testing.T) {
			ports := BuildService(corev1.IPv4Protocol, tc.node, tc.svc, nil, Options{})
			if len(ports) != 1 {
				t.Fatalf("%d ports, want 1", len(ports))
			}
			if got := ports[0].AllowFromNode; got != tc.want {
				t.Errorf("AllowFromNode = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestProxyNameSplitsServices: during a migration kube-proxy keeps every
// Service without the service-proxy-name label and the agent with
// --proxy-name takes only those labelled with its name; no Service is
// handled by both or by neither.
func TestProxyNameSplitsServices(t *testing.T) {
	svc := func(labels map[string]string) *corev1.Service {
		s := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).Obj()
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		s.Labels = labels
		return s
	}
	for name, tc := range map[string]struct {
		labels    map[string]string
		proxyName string
		want      bool
	}{
		"unlabelled, no proxy name":      {want: true},
		"unlabelled, proxy name set":     {proxyName: "svcnet", want: false},
		"labelled ours, proxy name set":  {labels: map[string]string{LabelServiceProxyName: "svcnet"}, proxyName: "svcnet", want: true},
		"labelled ours, no proxy name":   {labels: map[string]string{LabelServiceProxyName: "svcnet"}, want: false},
		"labelled another's":             {labels: map[string]string{LabelServiceProxyName: "other"}, proxyName: "svcnet", want: false},
		"labelled empty, no proxy name":  {labels: map[string]string{LabelServiceProxyName: ""}, want: false},
		"labelled empty, proxy name set": {labels: map[string]string{LabelServiceProxyName: ""}, proxyName: "svcnet", want: false},
	} {
		t.Run(name, func(t *testing.T) {
			ports := BuildService(corev1.IPv4Protocol, Node{}, svc(tc.labels), nil, Options{ProxyName: tc.proxyName})
			if got := ports != nil; got != tc.want {
				t.Errorf("handled = %v, want %v", got, tc.want)
			}
		})
	}
}
