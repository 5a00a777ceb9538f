// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

var addrComparer = cmp.Comparer(func(x, y netip.Addr) bool { return x == y })

func bgpAnn(mutate func(b *svcnetv1alpha1.BGPAnnouncement)) *svcnetv1alpha1.LoadBalancerAnnouncement {
	return ann("b", 1, svcnetv1alpha1.AnnouncementModeBGP, func(a *svcnetv1alpha1.LoadBalancerAnnouncement) { mutate(a.Spec.BGP) })
}

func TestCompileSessionSettings(t *testing.T) {
	a, err := Compile(bgpAnn(func(b *svcnetv1alpha1.BGPAnnouncement) {
		p := &b.Peers[0]
		p.PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{Name: "router-md5"}
		p.EBGPMultiHop = 3
		p.SourceAddress = "172.30.0.7"
	}))
	if err != nil {
		t.Fatal(err)
	}
	p := a.Peers[0]
	want := Peer{Address: p.Address, ASN: 64500, LocalASN: 64512, Port: 179, HoldTime: p.HoldTime, KeepaliveTime: p.KeepaliveTime,
		GracefulRestartTime: p.GracefulRestartTime, PasswordSecret: "router-md5", PasswordKey: "password", EBGPMultiHop: 3,
		SourceAddress: netip.MustParseAddr("172.30.0.7")}
	if diff := cmp.Diff(want, p, addrComparer); diff != "" {
		t.Errorf("peer (-want +got):\n%s", diff)
	}
}

func TestCompileBFD(t *testing.T) {
	ms := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
	tests := map[string]struct {
		bfd  *svcnetv1alpha1.BGPPeerBFD
		want BFD
	}{
		"unset: no BFD":       {bfd: nil, want: BFD{}},
		"empty: the defaults": {bfd: &svcnetv1alpha1.BGPPeerBFD{}, want: BFD{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3}},
		"every field": {
			bfd:  &svcnetv1alpha1.BGPPeerBFD{ReceiveInterval: ms(50), TransmitInterval: ms(100), DetectMultiplier: 5},
			want: BFD{ReceiveInterval: 50 * time.Millisecond, TransmitInterval: 100 * time.Millisecond, DetectMultiplier: 5},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, err := Compile(bgpAnn(func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].BFD = tc.bfd }))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, a.Peers[0].BFD); diff != "" {
				t.Errorf("bfd (-want +got):\n%s", diff)
			}
			if a.Peers[0].BFD.Enabled() != (tc.bfd != nil) {
				t.Errorf("Enabled() = %v with bfd %v", a.Peers[0].BFD.Enabled(), tc.bfd)
			}
		})
	}
}

func TestCompileAttributes(t *testing.T) {
	a, err := Compile(bgpAnn(func(b *svcnetv1alpha1.BGPAnnouncement) {
		b.Communities = []string{"64500:100", "no-export", "64500:100", "0:0"}
		b.LargeCommunities = []string{"4200000000:1:2", "1:2:3"}
		b.LocalPreference = ptr.To[int64](250)
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := PathAttributes{
		Communities:      []uint32{0, 64500<<16 | 100, 0xFFFFFF01},
		LargeCommunities: []LargeCommunity{{1, 2, 3}, {4200000000, 1, 2}},
		LocalPreference:  250, HasLocalPreference: true,
	}
	if diff := cmp.Diff(want, a.Attributes); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if !want.Equal(a.Attributes) || want.Equal(PathAttributes{Communities: want.Communities}) {
		t.Error("Equal does not tell the attributes apart")
	}
}

func TestCompileRejects(t *testing.T) {
	tests := map[string]struct {
		mutate func(b *svcnetv1alpha1.BGPAnnouncement)
		want   string
	}{
		"community part over 65535": {func(b *svcnetv1alpha1.BGPAnnouncement) { b.Communities = []string{"65536:1"} }, "bgp.communities[0]"},
		"community unknown name":    {func(b *svcnetv1alpha1.BGPAnnouncement) { b.Communities = []string{"no-such"} }, "well-known name"},
		"large community two parts": {func(b *svcnetv1alpha1.BGPAnnouncement) { b.LargeCommunities = []string{"1:2"} }, "global:local1:local2"},
		"large community over 32 bits": {
			func(b *svcnetv1alpha1.BGPAnnouncement) { b.LargeCommunities = []string{"1:4294967296:2"} }, "bgp.largeCommunities[0]"},
		"negative local preference": {func(b *svcnetv1alpha1.BGPAnnouncement) { b.LocalPreference = ptr.To[int64](-1) }, "bgp.localPreference"},
		"multihop TTL 1":            {func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].EBGPMultiHop = 1 }, "ebgpMultiHop 1 is out of range"},
		"multihop on iBGP": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].EBGPMultiHop = 2
			b.Peers[0].ASN = b.LocalASN
		}, "eBGP peers only"},
		"source of the other family": {func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].SourceAddress = "2001:db8::1" }, "not of the family"},
		"source not an address":      {func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].SourceAddress = "eth0" }, "sourceAddress"},
		"empty secret name": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{}
		}, "passwordSecretRef.name"},
		"bfd receive interval under 10ms": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{ReceiveInterval: &metav1.Duration{Duration: time.Millisecond}}
		}, "bfd.receiveInterval 1ms is out of range"},
		"bfd transmit interval over 60s": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{TransmitInterval: &metav1.Duration{Duration: time.Minute + time.Second}}
		}, "bfd.transmitInterval 1m1s is out of range"},
		"bfd multiplier 1": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{DetectMultiplier: 1}
		}, "bfd.detectMultiplier 1 is out of range"},
		"bfd with multihop": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{}
			b.Peers[0].EBGPMultiHop = 2
		}, "single-hop"},
		"bad peer nodeSelector": {func(b *svcnetv1alpha1.BGPAnnouncement) {
			b.Peers[0].NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
		}, "bgp.peers[0]: nodeSelector"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Compile(bgpAnn(tc.mutate))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestPeersOfNodeSelector(t *testing.T) {
	a, err := Compile(bgpAnn(func(b *svcnetv1alpha1.BGPAnnouncement) {
		b.Peers[0].NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}
		b.Peers = append(b.Peers, svcnetv1alpha1.BGPPeer{Address: "172.30.0.253", ASN: 64500})
	}))
	if err != nil {
		t.Fatal(err)
	}
	addrs := func(n *corev1.Node) []string {
		var out []string
		for _, p := range a.PeersOf(n) {
			out = append(out, p.Address.String())
		}
		return out
	}
	if got := addrs(node("n1", "r1")); !cmp.Equal(got, []string{"172.30.0.254", "172.30.0.253"}) {
		t.Errorf("rack r1 peers with %v, want both", got)
	}
	if got := addrs(node("n2", "r2")); !cmp.Equal(got, []string{"172.30.0.253"}) {
		t.Errorf("rack r2 peers with %v, want only the unselective peer", got)
	}
}

// Two announcements may give one peer different settings when no node
// has both of them for it.
func TestJudgePeerConflictHonoursPeerNodeSelectors(t *testing.T) {
	pools := []*svcnetv1alpha1.LoadBalancerIPPool{pool("a"), pool("b")}
	nodes := []*corev1.Node{node("n1", "r1"), node("n2", "r2")}
	peerIn := func(rack string, port int32) func(*svcnetv1alpha1.LoadBalancerAnnouncement) {
		return func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
			a.Spec.BGP.Peers[0].Port = port
			if rack != "" {
				a.Spec.BGP.Peers[0].NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": rack}}
			}
		}
	}
	v := Judge([]*svcnetv1alpha1.LoadBalancerAnnouncement{
		ann("old", 2, svcnetv1alpha1.AnnouncementModeBGP, poolSel("a"), peerIn("r1", 179)),
		ann("new", 1, svcnetv1alpha1.AnnouncementModeBGP, poolSel("b"), peerIn("r2", 1179)),
	}, pools, nodes)
	if !v["new"].Accepted {
		t.Errorf("disjoint peer nodeSelectors: new %+v, want Accepted", v["new"])
	}
	v = Judge([]*svcnetv1alpha1.LoadBalancerAnnouncement{
		ann("old", 2, svcnetv1alpha1.AnnouncementModeBGP, poolSel("a"), peerIn("", 179)),
		ann("new", 1, svcnetv1alpha1.AnnouncementModeBGP, poolSel("b"), peerIn("r2", 1179)),
	}, pools, nodes)
	if v["new"].Reason != svcnetv1alpha1.ReasonAnnouncementOverlap || !strings.Contains(v["new"].Message, "node n2") {
		t.Errorf("node n2 has the peer from both: new %+v, want Overlap naming n2", v["new"])
	}
}

func TestRouterID(t *testing.T) {
	v4 := netip.MustParseAddr("10.1.2.3")
	mk := func(ann string, addrs ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		if ann != "" {
			n.Annotations = map[string]string{svcnetv1alpha1.AnnotationBGPRouterID: ann}
		}
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	derived := derivedRouterID("fd00::1")
	tests := map[string]struct {
		node    *corev1.Node
		iface   netip.Addr
		want    netip.Addr
		wantErr bool
	}{
		"annotation first":           {node: mk("10.255.0.7", "192.0.2.1"), want: netip.MustParseAddr("10.255.0.7")},
		"IPv4 InternalIP":            {node: mk("", "fd00::1", "192.0.2.1"), iface: v4, want: netip.MustParseAddr("192.0.2.1")},
		"an interface's IPv4":        {node: mk("", "fd00::1"), iface: v4, want: v4},
		"IPv6 only: derived":         {node: mk("", "fd00::1"), want: derived},
		"bad annotation: reported":   {node: mk("fd00::9", "fd00::1"), want: derived, wantErr: true},
		"0.0.0.0 annotation refused": {node: mk("0.0.0.0", "192.0.2.1"), want: netip.MustParseAddr("192.0.2.1"), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := RouterID(tc.node, tc.iface)
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("RouterID = %s, %v; want %s, error %t", got, err, tc.want, tc.wantErr)
			}
		})
	}
	// Derived IDs are usable and differ between nodes.
	seen := map[netip.Addr]string{}
	for i := range 200 {
		a := netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}).String()
		id, _ := RouterID(mk("", a), netip.Addr{})
		if !id.Is4() || id.IsUnspecified() || id.IsLoopback() || id.As4()[0] == 0 {
			t.Errorf("node %s gets router ID %s", a, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("nodes %s and %s share router ID %s", other, a, id)
		}
		seen[id] = a
	}
}
