// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// bfdPeer is one session of FRR's `show bfd peers json`.
type bfdPeer struct {
	Peer                   string `json:"peer"`
	Status                 string `json:"status"`
	RemoteReceiveInterval  int    `json:"remote-receive-interval"`
	RemoteTransmitInterval int    `json:"remote-transmit-interval"`
	RemoteDetectMultiplier int    `json:"remote-detect-multiplier"`
}

// bfdPeers are the router's BFD sessions by peer address.
func bfdPeers(g Gomega, r *frr.Router) map[string]bfdPeer {
	out, err := r.Vtysh("show bfd peers json")
	g.Expect(err).NotTo(HaveOccurred())
	var peers []bfdPeer
	g.Expect(json.Unmarshal([]byte(out), &peers)).To(Succeed(), out)
	m := map[string]bfdPeer{}
	for _, p := range peers {
		m[p.Peer] = p
	}
	return m
}

// TestAnnounceBGPBFD runs agents (as processes) against FRR with bfdd:
// nodes 0 and 1 have bfd on their peer and their BFD sessions come Up
// with the intervals they asked for; node 2 has none while the router
// has, and its BGP session works all the same. When node 1's link is
// cut, the router's BFD takes its BGP session down (not its hold timer)
// and withdraws its routes, and node 1 resets its own session; when the
// link comes back, BFD and the routes do too. New bfd settings reach the
// router. A killed agent's routes stay (graceful restart) although its
// BFD dies with it.
func TestAnnounceBGPBFD(t *testing.T) {
	requireKernel(t)
	root := frrRoot(t)
	c, procs := startAnnounceCluster(t, true)
	ctx := context.Background()
	g := NewWithT(t)
	n0, n1, n2 := c.nodes[0], c.nodes[1], c.nodes[2]

	router, err := c.lab.AddRouter("router", netip.MustParsePrefix(routerIP+"/24"))
	g.Expect(err).NotTo(HaveOccurred())
	mustRun(t, c.lab, router, "ip", "addr", "add", ibgpRouterIP+"/24", "dev", "eth0")
	state, err := os.MkdirTemp("", "frr")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	profile := &frr.BFD{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3}
	var neighbors []frr.Neighbor
	for _, n := range c.nodes {
		neighbors = append(neighbors, frr.Neighbor{Addr: n.IP, ASN: 64512, BFD: profile})
	}
	r, err := frr.Start(frr.Config{Root: root, StateDir: state, NetNS: netlab.Path(router), RouterID: netip.MustParseAddr(routerIP),
		ASN: 64500, Neighbors: neighbors, Keepalive: time.Second, Hold: 3 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(r.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			for _, cmd := range []string{"show bgp summary", "show bfd peers"} {
				out, _ := r.Vtysh(cmd)
				t.Log(out)
			}
			for _, log := range []string{"bgpd.log", "bfdd.log"} {
				b, _ := os.ReadFile(filepath.Join(state, log))
				t.Logf("%s:\n%s", log, b)
			}
		}
	})
	mustRun(t, c.lab, c.client, "ip", "route", "replace", announcePool.String(), "via", routerIP)
	labelNode(g, c, n0.Name, "bfd")
	labelNode(g, c, n1.Name, "bfd")
	labelNode(g, c, n2.Name, "plain")

	hold := &metav1.Duration{Duration: 3 * time.Second}
	keepalive := &metav1.Duration{Duration: time.Second}
	ann := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "bfd"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP, BGP: &svcnetv1alpha1.BGPAnnouncement{
			LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{
				{Address: routerIP, ASN: 64500, HoldTime: hold, KeepaliveTime: keepalive, NodeSelector: onlyNodes("bfd"),
					BFD: &svcnetv1alpha1.BGPPeerBFD{}},
				// The router runs BFD with node 2 too; node 2 does not.
				{Address: ibgpRouterIP, ASN: 64500, HoldTime: hold, KeepaliveTime: keepalive, NodeSelector: onlyNodes("plain")},
			}}}}
	g.Expect(c.env.Client.Create(ctx, ann)).To(Succeed())
	ns, err := c.env.Namespace(ctx, "bfd")
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	web := webService(ns, "web")
	web.Spec.Type = corev1.ServiceTypeLoadBalancer
	web = c.service(t, web)
	var webAddr netip.Addr
	g.Eventually(func(g Gomega) { webAddr = lbAddress(g, c, web) }).WithTimeout(converge).Should(Succeed())

	t.Run("BFD Up with the nodes that have it, at their intervals; BGP with the one that has not", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c)))
		g.Eventually(func(g Gomega) {
			peers := bfdPeers(g, r)
			for _, n := range []string{n0.IP.String(), n1.IP.String()} {
				g.Expect(peers).To(HaveKeyWithValue(n, bfdPeer{Peer: n, Status: "up",
					RemoteReceiveInterval: 300, RemoteTransmitInterval: 300, RemoteDetectMultiplier: 3}))
			}
			g.Expect(peers).To(HaveKey(n2.IP.String()))
			g.Expect(peers[n2.IP.String()].Status).NotTo(Equal("up"))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Expect(established(r, n2.IP.String())).To(BeTrue(), "node 2 has no BFD: its BGP session stays up")
	})

	t.Run("a node's link cut: BFD takes its session down before the hold time", func(t *testing.T) {
		g := NewWithT(t)
		cut := time.Now()
		mustRun(t, c.lab, c.lab.Fabric(), "ip", "link", "set", "p-"+n1.Name, "down")
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(10 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(nodeIPs(c, n0.Name, n2.Name)))
		took := time.Since(cut)
		t.Logf("route via %s withdrawn %s after its link was cut (BFD 300ms x 3, hold time 3s)", n1.Name, took)
		// The session went down because BFD said so, not its hold timer.
		out, err := r.Vtysh("show bgp neighbor " + n1.IP.String())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`Last reset [^\n]*(?i:bfd down)`))
		g.Expect(took).To(BeNumerically("<", hold.Duration))
		g.Expect(bfdPeers(g, r)[n1.IP.String()].Status).To(Equal("down"))
		// The node found the router gone too, and reset its session.
		g.Eventually(func() (string, error) {
			b, err := os.ReadFile(filepath.Join(c.logDir, n1.Name+".log"))
			return string(b), err
		}).WithTimeout(converge).WithPolling(poll).Should(ContainSubstring("Reset the BGP session: BFD declared the peer down"))

		mustRun(t, c.lab, c.lab.Fabric(), "ip", "link", "set", "p-"+n1.Name, "up")
		g.Eventually(func(g Gomega) { g.Expect(bfdPeers(g, r)[n1.IP.String()].Status).To(Equal("up")) }).
			WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c)))
	})

	t.Run("new bfd settings reach the router", func(t *testing.T) {
		g := NewWithT(t)
		var a svcnetv1alpha1.LoadBalancerAnnouncement
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(ann), &a)).To(Succeed())
		a.Spec.BGP.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{DetectMultiplier: 5, TransmitInterval: &metav1.Duration{Duration: 200 * time.Millisecond}}
		g.Expect(c.env.Client.Update(ctx, &a)).To(Succeed())
		g.Eventually(func(g Gomega) {
			p := bfdPeers(g, r)[n0.IP.String()]
			g.Expect(p.Status).To(Equal("up"))
			g.Expect(p.RemoteDetectMultiplier).To(Equal(5))
			g.Expect(p.RemoteTransmitInterval).To(Equal(200))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c)))
	})

	t.Run("an agent killed: its routes stay (graceful restart), BFD comes back with it", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(procs[n0.Name].Process.Kill()).To(Succeed())
		// Longer than BFD's detection time and the hold time.
		g.Consistently(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(4 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(nodeIPs(c)))
		g.Expect(bfdPeers(g, r)[n0.IP.String()].Status).To(Equal("down"))
		procs[n0.Name] = c.startAgentProcess(t, n0, filepath.Join(c.logDir, "kubeconfig"))
		g.Eventually(func(g Gomega) {
			g.Expect(bfdPeers(g, r)[n0.IP.String()].Status).To(Equal("up"))
			g.Expect(established(r, n0.IP.String())).To(BeTrue())
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Consistently(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(nodeIPs(c)))
	})
}
