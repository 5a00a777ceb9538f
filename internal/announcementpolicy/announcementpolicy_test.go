// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ann(name string, age int, mode svcnetv1alpha1.AnnouncementMode, mutate ...func(*svcnetv1alpha1.LoadBalancerAnnouncement)) *svcnetv1alpha1.LoadBalancerAnnouncement {
	a := &svcnetv1alpha1.LoadBalancerAnnouncement{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(epoch.Add(-time.Duration(age) * time.Minute))},
		Spec:       svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: mode},
	}
	if mode == svcnetv1alpha1.AnnouncementModeBGP {
		a.Spec.BGP = &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: "172.30.0.254", ASN: 64500}}}
	}
	for _, m := range mutate {
		m(a)
	}
	return a
}

func accepted(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
	a.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.AnnouncementConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: a.Generation}}
}

func nodeSel(k, v string) func(*svcnetv1alpha1.LoadBalancerAnnouncement) {
	return func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
		a.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
}

func poolSel(v string) func(*svcnetv1alpha1.LoadBalancerAnnouncement) {
	return func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
		a.Spec.PoolSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": v}}
	}
}

func pool(name string) *svcnetv1alpha1.LoadBalancerIPPool {
	return &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name}},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.240.0/24"}}}
}

func node(name, rack string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": rack}}}
}

func TestJudge(t *testing.T) {
	pools := []*svcnetv1alpha1.LoadBalancerIPPool{pool("a"), pool("b")}
	nodes := []*corev1.Node{node("n1", "r1"), node("n2", "r2")}
	L2, BGP := svcnetv1alpha1.AnnouncementModeL2, svcnetv1alpha1.AnnouncementModeBGP
	tests := map[string]struct {
		anns []*svcnetv1alpha1.LoadBalancerAnnouncement
		want map[string]string // name -> reason
	}{
		"one of each mode for the same pool": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("l2", 1, L2), ann("bgp", 2, BGP)},
			want: map[string]string{"l2": "Accepted", "bgp": "Accepted"},
		},
		"two L2 for the same pool and node: the older works": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("new", 1, L2), ann("old", 2, L2)},
			want: map[string]string{"new": "Overlap", "old": "Accepted"},
		},
		"the accepted one keeps working even when younger": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("young", 1, L2, accepted), ann("old", 2, L2)},
			want: map[string]string{"young": "Accepted", "old": "Overlap"},
		},
		"disjoint nodes": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("r1", 1, L2, nodeSel("rack", "r1")), ann("r2", 2, L2, nodeSel("rack", "r2"))},
			want: map[string]string{"r1": "Accepted", "r2": "Accepted"},
		},
		"disjoint pools": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("a", 1, L2, poolSel("a")), ann("b", 2, L2, poolSel("b"))},
			want: map[string]string{"a": "Accepted", "b": "Accepted"},
		},
		"BGP, disjoint pools, same peer with the same settings": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("a", 1, BGP, poolSel("a")), ann("b", 2, BGP, poolSel("b"))},
			want: map[string]string{"a": "Accepted", "b": "Accepted"},
		},
		"BGP, disjoint pools, same peer with another ASN": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("a", 1, BGP, poolSel("a"), func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
				a.Spec.BGP.Peers[0].ASN = 64501
			}), ann("b", 2, BGP, poolSel("b"))},
			want: map[string]string{"a": "Overlap", "b": "Accepted"},
		},
		"malformed selector and duplicate peer": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{
				ann("sel", 1, L2, func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
					a.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
				}),
				ann("dup", 2, BGP, func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
					a.Spec.BGP.Peers = append(a.Spec.BGP.Peers, a.Spec.BGP.Peers[0])
				}),
			},
			want: map[string]string{"sel": "InvalidSpec", "dup": "InvalidSpec"},
		},
		"an invalid one never blocks a later valid one": {
			anns: []*svcnetv1alpha1.LoadBalancerAnnouncement{ann("bad", 2, BGP, func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
				a.Spec.BGP.Peers[0].Address = "router"
			}), ann("good", 1, BGP)},
			want: map[string]string{"bad": "InvalidSpec", "good": "Accepted"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := map[string]string{}
			for n, v := range Judge(tc.anns, pools, nodes) {
				got[n] = v.Reason
				if v.Accepted != (v.Reason == "Accepted") || v.Message == "" {
					t.Errorf("%s: inconsistent verdict %+v", n, v)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudgeOverlapMessageNamesTheOther(t *testing.T) {
	v := Judge([]*svcnetv1alpha1.LoadBalancerAnnouncement{ann("new", 1, "L2"), ann("old", 2, "L2")},
		[]*svcnetv1alpha1.LoadBalancerIPPool{pool("a")}, []*corev1.Node{node("n1", "r1")})["new"]
	for _, want := range []string{`"old"`, "pool a", "node n1"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q does not say %s", v.Message, want)
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	a, err := Compile(ann("b", 1, svcnetv1alpha1.AnnouncementModeBGP))
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{Address: netip.MustParseAddr("172.30.0.254"), ASN: 64500, LocalASN: 64512, Port: 179,
		HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second, GracefulRestartTime: 120 * time.Second}}
	if diff := cmp.Diff(want, a.Peers, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
}

func TestRankIsStableAndSpreads(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3"}
	wins := map[string]int{}
	for i := range 300 {
		addr := netip.MustParseAddr(fmt.Sprintf("192.168.%d.%d", 240+i/256, i%256))
		r := Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, nodes)
		if diff := cmp.Diff(r, Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, []string{"node-3", "node-1", "node-2"})); diff != "" {
			t.Fatalf("order depends on the input order (-a +b):\n%s", diff)
		}
		if !Outranks(svcnetv1alpha1.L2NodeElectionRendezvous, addr, r[0], r[1]) || !Outranks(svcnetv1alpha1.L2NodeElectionRendezvous, addr, r[1], r[2]) {
			t.Fatalf("Outranks disagrees with Rank for %s: %v", addr, r)
		}
		// Removing a node that is not first keeps the winner.
		if r2 := Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, []string{r[0], r[1]}); r2[0] != r[0] {
			t.Fatalf("winner of %s moved when a loser left", addr)
		}
		wins[r[0]]++
	}
	for _, n := range nodes {
		if wins[n] < 70 {
			t.Errorf("node %s wins %d of 300 addresses: not spread", n, wins[n])
		}
	}
}

// TestMetalLBElection: under the MetalLB election every address goes to
// the node MetalLB v0.16's speakers elect, the lowest SHA-256 of
// "node#address" (speaker/layer2_controller.go), which differs from the
// rendezvous election's choice for some addresses.
func TestMetalLBElection(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3"}
	differ := 0
	for i := range 100 {
		addr := netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i))
		metallb := slices.MinFunc(nodes, func(a, b string) int {
			ha, hb := sha256.Sum256([]byte(a+"#"+addr.String())), sha256.Sum256([]byte(b+"#"+addr.String()))
			return bytes.Compare(ha[:], hb[:])
		})
		if got := Rank(svcnetv1alpha1.L2NodeElectionMetalLB, addr, nodes)[0]; got != metallb {
			t.Fatalf("%s: the MetalLB election gives %s, MetalLB's speakers %s", addr, got, metallb)
		}
		if metallb != Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, nodes)[0] {
			differ++
		}
	}
	if differ == 0 {
		t.Error("the two elections agree on every address: the test shows nothing")
	}
}
