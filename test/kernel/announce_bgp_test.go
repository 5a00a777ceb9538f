// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const routerIP = "192.168.50.254"

// frrRoot is where make frr unpacked FRR.
func frrRoot(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(filepath.Dir(bin), "frr", "root")
	if err := frr.Available(root); err != nil {
		if os.Getenv("SVCNET_REQUIRE_NETNS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return root
}

var viaRE = regexp.MustCompile(`via (\S+)`)

// routerNexthops are the nodes the router sends addr to.
func routerNexthops(c *cluster, router string, addr netip.Addr) []string {
	out, _ := c.lab.Run(router, "ip", "route", "show", addr.String()+"/32")
	var hops []string
	for _, m := range viaRE.FindAllStringSubmatch(out, -1) {
		hops = append(hops, m[1])
	}
	slices.Sort(hops)
	return hops
}

func nodeIPs(c *cluster, names ...string) []string {
	var out []string
	for _, n := range c.nodes {
		if len(names) == 0 || slices.Contains(names, n.Name) {
			out = append(out, n.IP.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestAnnounceBGP runs agents (as processes) peering with a real router,
// FRR in a namespace of its own, which the client routes through: the
// router learns each address from the right nodes and spreads it over
// them (ECMP), withdraws a node when its Local endpoint goes, keeps the
// routes while an agent is killed and restarted (graceful restart), and
// drops a node whose link is cut once the hold time passes.
func TestAnnounceBGP(t *testing.T) {
	requireKernel(t)
	root := frrRoot(t)
	c, procs := startAnnounceCluster(t, true)
	ctx := context.Background()
	g := NewWithT(t)
	router, err := c.lab.AddRouter("router", netip.MustParsePrefix(routerIP+"/24"))
	g.Expect(err).NotTo(HaveOccurred())
	state, err := os.MkdirTemp("", "frr")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = os.RemoveAll(state) })
	var neighbors []frr.Neighbor
	for _, n := range c.nodes {
		neighbors = append(neighbors, frr.Neighbor{Addr: n.IP, ASN: 64512})
	}
	r, err := frr.Start(frr.Config{Root: root, StateDir: state, NetNS: netlab.Path(router), RouterID: netip.MustParseAddr(routerIP),
		ASN: 64500, Neighbors: neighbors, Keepalive: time.Second, Hold: 3 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(r.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := r.Vtysh("show bgp summary")
			t.Log(out)
		}
	})
	mustRun(t, c.lab, c.client, "ip", "route", "replace", announcePool.String(), "via", routerIP)

	ann := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "bgp"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP, BGP: &svcnetv1alpha1.BGPAnnouncement{
			LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: routerIP, ASN: 64500,
				HoldTime: &metav1.Duration{Duration: 3 * time.Second}, KeepaliveTime: &metav1.Duration{Duration: time.Second}}}}}}
	g.Expect(c.env.Client.Create(ctx, ann)).To(Succeed())
	ns, err := c.env.Namespace(ctx, "bgp")
	g.Expect(err).NotTo(HaveOccurred())
	outside := netlab.Client(c.client, time.Second)

	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	web := webService(ns, "web")
	web.Spec.Type = corev1.ServiceTypeLoadBalancer
	web = c.service(t, web)
	var webAddr netip.Addr
	g.Eventually(func(g Gomega) { webAddr = lbAddress(g, c, web) }).WithTimeout(converge).Should(Succeed())

	t.Run("Cluster: learned from every node, ECMP", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c)))
		g.Eventually(func() error { _, err := netlab.Get(ctx, outside, "http://"+webAddr.String()+"/"); return err }).
			WithTimeout(converge).WithPolling(poll).Should(Succeed())
		out, err := r.Vtysh("show ip bgp " + webAddr.String() + "/32")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("multipath"))
	})

	t.Run("Local: only nodes with an endpoint, withdrawn when it goes", func(t *testing.T) {
		g := NewWithT(t)
		local := webService(ns, "local")
		local.Spec.Type = corev1.ServiceTypeLoadBalancer
		local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		local = c.service(t, local)
		pods := c.addPods(t, ns, "local", c.nodes[1], 1)
		var addr netip.Addr
		g.Eventually(func(g Gomega) { addr = lbAddress(g, c, local) }).WithTimeout(converge).Should(Succeed())
		g.Eventually(func() []string { return routerNexthops(c, router, addr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c, c.nodes[1].Name)))
		c.addPods(t, ns, "local", c.nodes[2], 1)
		g.Expect(c.env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pods[0].Name}},
			&client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		g.Eventually(func() []string { return routerNexthops(c, router, addr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c, c.nodes[2].Name)))
		g.Eventually(func() error { _, err := netlab.Get(ctx, outside, "http://"+addr.String()+"/"); return err }).
			WithTimeout(converge).WithPolling(poll).Should(Succeed())
	})

	t.Run("an agent killed and restarted: the router keeps its routes (graceful restart)", func(t *testing.T) {
		g := NewWithT(t)
		n := c.nodes[0]
		g.Expect(procs[n.Name].Process.Kill()).To(Succeed())
		// Longer than the hold time: without graceful restart the route
		// would go with the session.
		g.Consistently(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(5 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(nodeIPs(c)))
		procs[n.Name] = c.startAgentProcess(t, n, filepath.Join(c.logDir, "kubeconfig"))
		g.Eventually(func() (string, error) { return r.Vtysh("show bgp neighbor " + n.IP.String()) }).
			WithTimeout(converge).WithPolling(poll).Should(ContainSubstring("BGP state = Established"))
		g.Consistently(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(nodeIPs(c)))
	})

	t.Run("a node's link cut: withdrawn after the hold time", func(t *testing.T) {
		g := NewWithT(t)
		n := c.nodes[1]
		cut := time.Now()
		mustRun(t, c.lab, c.lab.Fabric(), "ip", "link", "set", "p-"+n.Name, "down")
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(10 * time.Second).WithPolling(50 * time.Millisecond).Should(Equal(nodeIPs(c, c.nodes[0].Name, c.nodes[2].Name)))
		took := time.Since(cut)
		t.Logf("route via %s withdrawn %s after its link was cut (hold time 3s)", n.Name, took)
		g.Expect(took).To(BeNumerically("<", 4500*time.Millisecond))
		mustRun(t, c.lab, c.lab.Fabric(), "ip", "link", "set", "p-"+n.Name, "up")
		g.Eventually(func() []string { return routerNexthops(c, router, webAddr) }).
			WithTimeout(converge).WithPolling(poll).Should(Equal(nodeIPs(c)))
	})
}
