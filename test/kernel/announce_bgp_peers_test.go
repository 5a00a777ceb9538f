// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// The router's other addresses, one per kind of session.
const (
	multihopRouterIP = "192.168.50.253"
	ibgpRouterIP     = "192.168.50.252"
	// loopbackSource is node 1's address the multihop session leaves from.
	loopbackSource = "10.99.0.1"
	peerLabel      = "svcnet.io/test-peer"
)

// ribPath is one path of FRR's `show bgp ipv4 unicast <prefix> json`.
type ribPath struct {
	Peer struct {
		PeerID string `json:"peerId"`
	} `json:"peer"`
	Community struct {
		String string `json:"string"`
	} `json:"community"`
	LargeCommunity struct {
		String string `json:"string"`
	} `json:"largeCommunity"`
	LocPrf *int64 `json:"locPrf"`
}

// ribPaths are the router's BGP paths to addr/32.
func ribPaths(g Gomega, r *frr.Router, addr netip.Addr) []ribPath {
	return ribPrefixPaths(g, r, netip.PrefixFrom(addr, 32))
}

// ribPrefixPaths are the router's BGP paths to exactly prefix.
func ribPrefixPaths(g Gomega, r *frr.Router, prefix netip.Prefix) []ribPath {
	out, err := r.Vtysh("show bgp ipv4 unicast " + prefix.String() + " json")
	g.Expect(err).NotTo(HaveOccurred())
	var rib struct {
		Paths []ribPath `json:"paths"`
	}
	g.Expect(json.Unmarshal([]byte(out), &rib)).To(Succeed(), out)
	return rib.Paths
}

// established tells whether the router's session with neighbor is up.
func established(r *frr.Router, neighbor string) bool {
	out, _ := r.Vtysh("show bgp neighbor " + neighbor)
	return strings.Contains(out, "BGP state = Established")
}

func labelNode(g Gomega, c *cluster, name, value string) {
	ctx := context.Background()
	var n corev1.Node
	g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: name}, &n)).To(Succeed())
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[peerLabel] = value
	g.Expect(c.env.Client.Patch(ctx, &n, patch)).To(Succeed())
}

func onlyNodes(value string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{peerLabel: value}}
}

// TestAnnounceBGPPeerSettings runs agents (as processes) against FRR
// with the settings real routers need: node 0 peers with a TCP-MD5
// password from a Secret (no session while the Secret is missing or
// wrong, the other peers unaffected), node 1 from a loopback address
// with a TTL of 255 that the router's GTSM insists on (multihop and
// source address), node 2 over iBGP only once its label matches the
// peer's nodeSelector; the routes carry their announcement's
// communities, large communities and, on iBGP, LOCAL_PREF; and a node
// sends each peer only the addresses of the announcements that list it.
func TestAnnounceBGPPeerSettings(t *testing.T) {
	requireKernel(t)
	root := frrRoot(t)
	c, _ := startAnnounceCluster(t, true)
	ctx := context.Background()
	g := NewWithT(t)
	n0, n1, n2 := c.nodes[0], c.nodes[1], c.nodes[2]

	router, err := c.lab.AddClient("router", netip.MustParsePrefix(routerIP+"/24"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range []string{multihopRouterIP, ibgpRouterIP} {
		mustRun(t, c.lab, router, "ip", "addr", "add", a+"/24", "dev", "eth0")
	}
	mustRun(t, c.lab, n1.NetNS, "ip", "addr", "add", loopbackSource+"/32", "dev", "lo")
	mustRun(t, c.lab, router, "ip", "route", "add", loopbackSource+"/32", "via", n1.IP.String())
	state, err := os.MkdirTemp("", "frr")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	r, err := frr.Start(frr.Config{Root: root, StateDir: state, NetNS: netlab.Path(router), RouterID: netip.MustParseAddr(routerIP),
		ASN: 64500, Keepalive: time.Second, Hold: 3 * time.Second, Neighbors: []frr.Neighbor{
			{Addr: n0.IP, ASN: 64512, Password: "right-md5"},
			{Addr: netip.MustParseAddr(loopbackSource), ASN: 64512, TTLSecurityHops: 2},
			{Addr: n2.IP, ASN: 64500},
		}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(r.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := r.Vtysh("show bgp summary")
			t.Log(out)
		}
	})
	secretNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: announce.DefaultSecretNamespace}}
	if err := c.env.Client.Create(ctx, secretNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labelNode(g, c, n0.Name, "md5")
	labelNode(g, c, n1.Name, "multihop")

	hold := &metav1.Duration{Duration: 3 * time.Second}
	keepalive := &metav1.Duration{Duration: time.Second}
	ebgp := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "ebgp"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "announce"}},
			BGP: &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512,
				Communities: []string{"64512:100", "no-export"}, LargeCommunities: []string{"64512:7:8"},
				// eBGP: never sent.
				LocalPreference: ptr.To[int64](300),
				Peers: []svcnetv1alpha1.BGPPeer{
					{Address: routerIP, ASN: 64500, HoldTime: hold, KeepaliveTime: keepalive, NodeSelector: onlyNodes("md5"),
						PasswordSecretRef: &svcnetv1alpha1.BGPPasswordSecretRef{Name: "router-md5"}},
					// No multihop yet: TTL 1, which the router's GTSM drops.
					{Address: multihopRouterIP, ASN: 64500, HoldTime: hold, KeepaliveTime: keepalive, NodeSelector: onlyNodes("multihop"),
						SourceAddress: loopbackSource},
				}}}}
	g.Expect(c.env.Client.Create(ctx, ebgp)).To(Succeed())
	ibgpPool := &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "ibgp", Labels: map[string]string{"pool": "ibgp"}},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.79.0/28"}}}
	g.Expect(c.env.Client.Create(ctx, ibgpPool)).To(Succeed())
	ibgp := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "ibgp"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "ibgp"}},
			NodeSelector: onlyNodes("ibgp"),
			BGP: &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64500, LocalPreference: ptr.To[int64](250), Communities: []string{"64500:9"},
				Peers: []svcnetv1alpha1.BGPPeer{{Address: ibgpRouterIP, ASN: 64500, HoldTime: hold, KeepaliveTime: keepalive, NodeSelector: onlyNodes("ibgp")}}}}}
	g.Expect(c.env.Client.Create(ctx, ibgp)).To(Succeed())

	ns, err := c.env.Namespace(ctx, "bgp")
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	web := webService(ns, "web")
	web.Spec.Type = corev1.ServiceTypeLoadBalancer
	web.Annotations = map[string]string{loadbalancer.AnnotationPool: "announce"}
	web = c.service(t, web)
	inner := webService(ns, "inner")
	inner.Spec.Selector = web.Spec.Selector
	inner.Spec.Type = corev1.ServiceTypeLoadBalancer
	inner.Annotations = map[string]string{loadbalancer.AnnotationPool: "ibgp"}
	inner = c.service(t, inner)
	var webAddr, innerAddr netip.Addr
	g.Eventually(func(g Gomega) {
		webAddr, innerAddr = lbAddress(g, c, web), lbAddress(g, c, inner)
	}).WithTimeout(converge).Should(Succeed())

	t.Run("a missing password Secret leaves its peer out and says so, the others unaffected", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(c.env.Client.List(ctx, &events)).To(Succeed())
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("Reason", announce.EventPasswordNotFound),
				HaveField("Regarding.Name", "ebgp"),
				HaveField("Note", And(ContainSubstring(n0.Name), ContainSubstring("Secret svcnet-system/router-md5 does not exist"))))))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Consistently(func() bool { return established(r, n0.IP.String()) }).WithTimeout(2 * time.Second).Should(BeFalse())
	})

	t.Run("multihop and source address: no session at TTL 1, one at TTL 255 from the loopback", func(t *testing.T) {
		g := NewWithT(t)
		g.Consistently(func() bool { return established(r, loopbackSource) }).WithTimeout(5 * time.Second).Should(BeFalse())
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(ebgp), ebgp)).To(Succeed())
		ebgp.Spec.BGP.Peers[1].EBGPMultiHop = 255
		g.Expect(c.env.Client.Update(ctx, ebgp)).To(Succeed())
		g.Eventually(func() bool { return established(r, loopbackSource) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
		g.Eventually(func(g Gomega) {
			g.Expect(ribPaths(g, r, webAddr)).To(ContainElement(HaveField("Peer.PeerID", loopbackSource)))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	})

	t.Run("TCP-MD5: no session with a wrong password, one with the right", func(t *testing.T) {
		g := NewWithT(t)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: announce.DefaultSecretNamespace, Name: "router-md5"},
			Data: map[string][]byte{"password": []byte("wrong-md5")}}
		g.Expect(c.env.Client.Create(ctx, secret)).To(Succeed())
		g.Consistently(func() bool { return established(r, n0.IP.String()) }).WithTimeout(5 * time.Second).Should(BeFalse())
		secret.Data["password"] = []byte("right-md5")
		g.Expect(c.env.Client.Update(ctx, secret)).To(Succeed())
		g.Eventually(func() bool { return established(r, n0.IP.String()) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
	})

	t.Run("communities and large communities on the routes, no LOCAL_PREF over eBGP, changes re-advertised", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			paths := ribPaths(g, r, webAddr)
			g.Expect(paths).To(HaveLen(2)) // nodes 0 and 1; node 2 has no peer
			for _, p := range paths {
				g.Expect(p.Community.String).To(Equal("64512:100 no-export"))
				g.Expect(p.LargeCommunity.String).To(Equal("64512:7:8"))
				g.Expect(p.LocPrf).To(Or(BeNil(), HaveValue(BeEquivalentTo(100))), "eBGP carries no LOCAL_PREF")
			}
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())

		// Changed attributes replace the advertised paths'.
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(ebgp), ebgp)).To(Succeed())
		ebgp.Spec.BGP.Communities, ebgp.Spec.BGP.LargeCommunities = []string{"64512:200"}, nil
		g.Expect(c.env.Client.Update(ctx, ebgp)).To(Succeed())
		g.Eventually(func(g Gomega) {
			paths := ribPaths(g, r, webAddr)
			g.Expect(paths).To(HaveLen(2))
			for _, p := range paths {
				g.Expect(p.Community.String).To(Equal("64512:200"))
				g.Expect(p.LargeCommunity.String).To(BeEmpty())
			}
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	})

	t.Run("a peer's nodeSelector: node 2 peers only once labelled, over iBGP with LOCAL_PREF", func(t *testing.T) {
		g := NewWithT(t)
		g.Consistently(func() bool { return established(r, n2.IP.String()) }).WithTimeout(3 * time.Second).Should(BeFalse())
		g.Expect(ribPaths(NewWithT(t), r, innerAddr)).To(BeEmpty())
		labelNode(g, c, n2.Name, "ibgp")
		g.Eventually(func() bool { return established(r, n2.IP.String()) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
		g.Eventually(func(g Gomega) {
			paths := ribPaths(g, r, innerAddr)
			g.Expect(paths).To(HaveLen(1))
			g.Expect(paths[0].Peer.PeerID).To(Equal(n2.IP.String()))
			g.Expect(paths[0].LocPrf).To(HaveValue(BeEquivalentTo(250)))
			// Its own announcement's attributes, not ebgp's.
			g.Expect(paths[0].Community.String).To(Equal("64500:9"))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	})

	t.Run("each address goes only to its announcement's peers", func(t *testing.T) {
		// Node 2 advertises web's address too (ebgp selects every node),
		// but ebgp has no peer for node 2: its one session, the ibgp
		// router's, must not carry it.
		g := NewWithT(t)
		g.Consistently(func(g Gomega) {
			g.Expect(ribPaths(g, r, webAddr)).NotTo(ContainElement(HaveField("Peer.PeerID", n2.IP.String())))
		}).WithTimeout(3 * time.Second).WithPolling(poll).Should(Succeed())
		g.Expect(ribPaths(g, r, webAddr)).To(HaveLen(2), "nodes 0 and 1 still advertise it to their peers")
	})

	t.Run("aggregationLength: one route for the pool, refused where it would reach beyond it", func(t *testing.T) {
		g := NewWithT(t)
		pool := netip.MustParsePrefix(ibgpPool.Spec.CIDRs[0])
		setAggregation := func(l int32) {
			g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(ibgp), ibgp)).To(Succeed())
			ibgp.Spec.BGP.AggregationLength = ptr.To(l)
			g.Expect(c.env.Client.Update(ctx, ibgp)).To(Succeed())
		}
		setAggregation(int32(pool.Bits()))
		g.Eventually(func(g Gomega) {
			paths := ribPrefixPaths(g, r, pool)
			g.Expect(paths).To(HaveLen(1))
			g.Expect(paths[0].Peer.PeerID).To(Equal(n2.IP.String()))
			g.Expect(paths[0].LocPrf).To(HaveValue(BeEquivalentTo(250)))
			g.Expect(ribPaths(g, r, innerAddr)).To(BeEmpty(), "the /32 is withdrawn")
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())

		setAggregation(int32(pool.Bits() - 1))
		g.Eventually(func(g Gomega) {
			g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(ibgp), ibgp)).To(Succeed())
			cond := meta.FindStatusCondition(ibgp.Status.Conditions, svcnetv1alpha1.AnnouncementConditionAccepted)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(svcnetv1alpha1.ReasonAnnouncementInvalid))
			g.Expect(cond.Message).To(ContainSubstring("beyond pool ibgp"))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	})
}
