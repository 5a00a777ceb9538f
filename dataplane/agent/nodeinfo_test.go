// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestCompleteFromNode checks what the agent reads of its Node at start,
// as kube-proxy: primary is the Node's InternalIP per family (ExternalIP
// without one; --bind-address over its family; never loopback), NodeCIDR
// its podCIDRs.
func TestCompleteFromNode(t *testing.T) {
	addrs := func(a ...string) []corev1.NodeAddress {
		var out []corev1.NodeAddress
		for i := 0; i < len(a); i += 2 {
			out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a[i]), Address: a[i+1]})
		}
		return out
	}
	for name, tc := range map[string]struct {
		addresses []corev1.NodeAddress
		cfg       Config
		want      []netip.Prefix
	}{
		"InternalIPs of both families": {
			addresses: addrs("Hostname", "node-a", "ExternalIP", "203.0.113.7", "InternalIP", "192.168.1.7", "InternalIP", "192.168.1.8", "InternalIP", "fd00::7"),
			want:      prefixes("192.168.1.7/32", "fd00::7/128"),
		},
		"ExternalIP without an InternalIP": {
			addresses: addrs("ExternalIP", "203.0.113.7"),
			want:      prefixes("203.0.113.7/32"),
		},
		"--bind-address over its family": {
			addresses: addrs("InternalIP", "192.168.1.7", "InternalIP", "fd00::7"),
			cfg:       Config{BindAddress: netip.MustParseAddr("192.168.9.9")},
			want:      prefixes("192.168.9.9/32", "fd00::7/128"),
		},
		"beside other CIDRs": {
			addresses: addrs("InternalIP", "192.168.1.7"),
			cfg:       Config{NodePortAddresses: prefixes("127.0.0.0/8")},
			want:      prefixes("127.0.0.0/8", "192.168.1.7/32"),
		},
		"a loopback IP is not primary": {
			addresses: addrs("InternalIP", "127.0.0.1"),
			cfg:       Config{NodePortAddresses: prefixes("10.0.0.0/8")},
			want:      prefixes("10.0.0.0/8"),
		},
	} {
		t.Run(name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: tc.addresses}}
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node).Build()
			cfg := tc.cfg
			cfg.NodeName, cfg.NodePortPrimary = "node-a", true
			got, err := completeFromNode(context.Background(), c, cfg, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.NodePortAddresses, cmpConfig...); diff != "" || got.NodePortPrimary {
				t.Errorf("NodePortAddresses (-want +got):\n%s (primary left: %v)", diff, got.NodePortPrimary)
			}
		})
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Spec:   corev1.NodeSpec{PodCIDRs: []string{"10.244.3.0/24", "fd00:10:244:3::/64"}},
		Status: corev1.NodeStatus{Addresses: addrs("InternalIP", "192.168.1.7")}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node).Build()
	got, err := completeFromNode(context.Background(), c, Config{NodeName: "node-a", DetectLocalFromNode: true}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	want := map[corev1.IPFamily][]netip.Prefix{corev1.IPv4Protocol: prefixes("10.244.3.0/24"), corev1.IPv6Protocol: prefixes("fd00:10:244:3::/64")}
	if diff := cmp.Diff(want, got.ClusterCIDRs, cmpConfig...); diff != "" {
		t.Errorf("NodeCIDR ClusterCIDRs (-want +got):\n%s", diff)
	}
}

// TestNodeModelTakesBindAddress checks that the node's own addresses in
// the model (allowFromNode's, for loadBalancerSourceRanges) are those
// --nodeport-addresses=primary uses: --bind-address over its family, as
// kube-proxy's detectNodeIPs gives both.
func TestNodeModelTakesBindAddress(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"},
			{Type: corev1.NodeInternalIP, Address: "fd00::1"},
		}},
	}
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(node).Build()
	for name, tc := range map[string]struct {
		bind netip.Addr
		want []netip.Addr
	}{
		"no --bind-address":   {want: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}},
		"IPv4 --bind-address": {bind: netip.MustParseAddr("192.168.1.5"), want: []netip.Addr{netip.MustParseAddr("192.168.1.5"), netip.MustParseAddr("fd00::1")}},
	} {
		a := &Agent{cfg: Config{NodeName: "node-a", BindAddress: tc.bind}, reader: reader, log: logr.Discard()}
		got, err := a.nodeModel(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got.IPs, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Errorf("%s: node IPs (-want +got):\n%s", name, diff)
		}
	}
}
