// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcement_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

func create(ctx context.Context, obj client.Object) {
	Expect(env.Client.Create(ctx, obj)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(env.Client.Delete(ctx, obj))).To(Succeed())
	})
}

// expectReason waits for the announcement's Accepted condition to have
// reason, for its current generation, and returns its message.
func expectReason(ctx context.Context, name, reason string) string {
	var msg string
	Eventually(func(g Gomega) {
		var a svcnetv1alpha1.LoadBalancerAnnouncement
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, &a)).To(Succeed())
		c := apimeta.FindStatusCondition(a.Status.Conditions, svcnetv1alpha1.AnnouncementConditionAccepted)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(a.Generation))
		g.Expect(c.Reason).To(Equal(reason))
		want := metav1.ConditionFalse
		if reason == svcnetv1alpha1.ReasonAnnouncementAccepted {
			want = metav1.ConditionTrue
		}
		g.Expect(c.Status).To(Equal(want))
		msg = c.Message
	}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	return msg
}

func l2(name, rack string) *svcnetv1alpha1.LoadBalancerAnnouncement {
	return &svcnetv1alpha1.LoadBalancerAnnouncement{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{
			Mode:         svcnetv1alpha1.AnnouncementModeL2,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test": name}},
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": rack}},
		},
	}
}

var _ = Describe("LoadBalancerAnnouncement status", func() {
	It("refuses the newer of two overlapping announcements, then accepts it when the other goes", func(ctx SpecContext) {
		create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ov-node", Labels: map[string]string{"rack": "ov"}}})
		create(ctx, &svcnetv1alpha1.LoadBalancerIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "ov-pool", Labels: map[string]string{"test": "ov-old"}},
			Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"198.51.100.0/28"}},
		})
		old := l2("ov-old", "ov")
		create(ctx, old)
		expectReason(ctx, "ov-old", svcnetv1alpha1.ReasonAnnouncementAccepted)
		newer := l2("ov-new", "ov")
		newer.Spec.PoolSelector = nil // every pool: ov-pool too
		create(ctx, newer)
		msg := expectReason(ctx, "ov-new", svcnetv1alpha1.ReasonAnnouncementOverlap)
		Expect(msg).To(And(ContainSubstring(`"ov-old"`), ContainSubstring("ov-pool"), ContainSubstring("ov-node")))
		expectReason(ctx, "ov-old", svcnetv1alpha1.ReasonAnnouncementAccepted)

		Expect(env.Client.Delete(ctx, old)).To(Succeed())
		expectReason(ctx, "ov-new", svcnetv1alpha1.ReasonAnnouncementAccepted)
	})

	It("reports an overlap that a node's new label creates, keeping the accepted one", func(ctx SpecContext) {
		create(ctx, &svcnetv1alpha1.LoadBalancerIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "lbl-pool", Labels: map[string]string{"test": "lbl-a"}},
			Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"198.51.100.16/28"}},
		})
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "lbl-node", Labels: map[string]string{"rack": "lbl-a"}}}
		create(ctx, node)
		a := l2("lbl-a", "lbl-a")
		create(ctx, a)
		expectReason(ctx, "lbl-a", svcnetv1alpha1.ReasonAnnouncementAccepted)
		b := l2("lbl-b", "lbl-b")
		b.Spec.PoolSelector = a.Spec.PoolSelector
		create(ctx, b)
		expectReason(ctx, "lbl-b", svcnetv1alpha1.ReasonAnnouncementAccepted)

		node.Labels["rack"] = "lbl-b"
		node.Labels["rack-a"] = "yes"
		Expect(env.Client.Update(ctx, node)).To(Succeed())
		// Now only b selects the node: still no overlap.
		expectReason(ctx, "lbl-b", svcnetv1alpha1.ReasonAnnouncementAccepted)
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(a), a)).To(Succeed())
		a.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack-a": "yes"}}
		Expect(env.Client.Update(ctx, a)).To(Succeed())
		// b is Accepted for its generation, a's edit is not yet: a, the
		// one whose edit made the overlap, stops, whatever their ages.
		msg := expectReason(ctx, "lbl-a", svcnetv1alpha1.ReasonAnnouncementOverlap)
		Expect(msg).To(ContainSubstring(`"lbl-b"`))
		expectReason(ctx, "lbl-b", svcnetv1alpha1.ReasonAnnouncementAccepted)
	})

	It("gives a malformed selector InvalidSpec and the API server refuses malformed fields", func(ctx SpecContext) {
		bad := l2("bad-selector", "x")
		bad.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Near"}}}
		create(ctx, bad)
		Expect(expectReason(ctx, "bad-selector", svcnetv1alpha1.ReasonAnnouncementInvalid)).To(ContainSubstring("nodeSelector"))

		shortHold := &svcnetv1alpha1.LoadBalancerAnnouncement{
			ObjectMeta: metav1.ObjectMeta{Name: "short-hold"},
			Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP, BGP: &svcnetv1alpha1.BGPAnnouncement{
				LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: "10.0.0.1", ASN: 64500, HoldTime: &metav1.Duration{Duration: time.Second}}},
			}},
		}
		err := env.Client.Create(ctx, shortHold)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("holdTime must be at least 3s"))

		l2WithBGP := l2("l2-bgp", "x")
		l2WithBGP.Spec.BGP = shortHold.Spec.BGP
		l2WithBGP.Spec.BGP.Peers[0].HoldTime = nil
		err = env.Client.Create(ctx, l2WithBGP)
		Expect(err).To(MatchError(ContainSubstring("bgp is required in mode BGP and not allowed in mode L2")))

		noPeers := &svcnetv1alpha1.LoadBalancerAnnouncement{
			ObjectMeta: metav1.ObjectMeta{Name: "no-peers"},
			Spec:       svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP, BGP: &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512}},
		}
		Expect(apierrors.IsInvalid(env.Client.Create(ctx, noPeers))).To(BeTrue())
	})

	It("refuses malformed BGP session settings and path attributes", func(ctx SpecContext) {
		for msg, mutate := range map[string]func(b *svcnetv1alpha1.BGPAnnouncement){
			"sourceAddress must be an IP address":              func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].SourceAddress = "eth0" },
			"sourceAddress must be of the address's IP family": func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].SourceAddress = "2001:db8::1" },
			"ebgpMultiHop applies to eBGP peers only":          func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].ASN, b.Peers[0].EBGPMultiHop = 64512, 2 },
			"spec.bgp.peers[0].ebgpMultiHop":                   func(b *svcnetv1alpha1.BGPAnnouncement) { b.Peers[0].EBGPMultiHop = 1 },
			"a community is ASN:value or a well-known name":    func(b *svcnetv1alpha1.BGPAnnouncement) { b.Communities = []string{"no-such-community"} },
			"a large community is global:local1:local2":        func(b *svcnetv1alpha1.BGPAnnouncement) { b.LargeCommunities = []string{"1:2"} },
			"spec.bgp.localPreference":                         func(b *svcnetv1alpha1.BGPAnnouncement) { b.LocalPreference = ptr.To[int64](-1) },
			"bfd is single-hop (RFC 5881)": func(b *svcnetv1alpha1.BGPAnnouncement) {
				b.Peers[0].EBGPMultiHop, b.Peers[0].BFD = 2, &svcnetv1alpha1.BGPPeerBFD{}
			},
			"receiveInterval must be between 10ms and 60s": func(b *svcnetv1alpha1.BGPAnnouncement) {
				b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{ReceiveInterval: &metav1.Duration{Duration: time.Millisecond}}
			},
			"transmitInterval must be between 10ms and 60s": func(b *svcnetv1alpha1.BGPAnnouncement) {
				b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{TransmitInterval: &metav1.Duration{Duration: 2 * time.Minute}}
			},
			"spec.bgp.peers[0].bfd.detectMultiplier": func(b *svcnetv1alpha1.BGPAnnouncement) {
				b.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{DetectMultiplier: 1}
			},
			"spec.bgp.peers[0].passwordSecretRef.name": func(b *svcnetv1alpha1.BGPAnnouncement) {
				b.Peers[0].PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{}
			},
		} {
			a := bgpAnnouncement("bad-session")
			mutate(a.Spec.BGP)
			err := env.Client.Create(ctx, a)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", msg, err)
			Expect(err.Error()).To(ContainSubstring(msg))
		}
	})

	It("gives values that CEL lets through but BGP cannot carry InvalidSpec, naming the field", func(ctx SpecContext) {
		community := bgpAnnouncement("community-range")
		community.Spec.BGP.Communities = []string{"64500:100", "70000:1"}
		create(ctx, community)
		Expect(expectReason(ctx, "community-range", svcnetv1alpha1.ReasonAnnouncementInvalid)).
			To(And(ContainSubstring("bgp.communities[1]"), ContainSubstring("70000:1"), ContainSubstring("0-65535")))

		large := bgpAnnouncement("large-range")
		large.Spec.BGP.LargeCommunities = []string{"4294967296:1:1"}
		create(ctx, large)
		Expect(expectReason(ctx, "large-range", svcnetv1alpha1.ReasonAnnouncementInvalid)).
			To(And(ContainSubstring("bgp.largeCommunities[0]"), ContainSubstring("0-4294967295")))

		good := bgpAnnouncement("all-settings")
		good.Spec.PoolSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "all-settings"}}
		good.Spec.BGP.Communities = []string{"64500:100", "no-export"}
		good.Spec.BGP.LargeCommunities = []string{"4200000000:1:2"}
		good.Spec.BGP.LocalPreference = ptr.To[int64](200)
		p := &good.Spec.BGP.Peers[0]
		p.PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{Name: "router"}
		p.EBGPMultiHop, p.SourceAddress = 3, "10.0.0.9"
		p.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}
		create(ctx, good)
		expectReason(ctx, "all-settings", svcnetv1alpha1.ReasonAnnouncementAccepted)
	})
})

// bgpAnnouncement is a valid BGP announcement of no pool.
func bgpAnnouncement(name string) *svcnetv1alpha1.LoadBalancerAnnouncement {
	return &svcnetv1alpha1.LoadBalancerAnnouncement{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{
			Mode:         svcnetv1alpha1.AnnouncementModeBGP,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test": name}},
			BGP:          &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: "10.0.0.1", ASN: 64500}}},
		},
	}
}
