// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/segmentwatch"
)

// announcePool is the LoadBalancerIPPool of the announcement tests: on the
// client's link, reached only through what the nodes answer.
var announcePool = netip.MustParsePrefix("192.168.78.0/28")

// startAnnounceCluster is three nodes with agents (nftables) on one
// segment, the manager's EndpointSlice, loadbalancer and announcement
// controllers, and a client with the pool on its link and no route
// through any node. With processes, the agents run as processes (the
// map), which a test can kill; else in this process.
func startAnnounceCluster(t *testing.T, processes bool) (*cluster, map[string]*exec.Cmd) {
	t.Helper()
	g := NewWithT(t)
	c := newCluster(t, agent.ModeNFTables, "svcnet-ka", 3, endpointslice.ControllerName, controllers.LoadBalancerName, controllers.AnnouncementName)
	env, lab := c.env, c.lab
	mustRun(t, lab, c.client, "ip", "route", "add", announcePool.String(), "dev", "eth0")
	procs := map[string]*exec.Cmd{}
	kubeconfig := filepath.Join(c.logDir, "kubeconfig")
	g.Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
	for _, n := range c.nodes {
		if processes {
			c.forwardAPIServer(t, n)
			procs[n.Name] = c.startAgentProcess(t, n, kubeconfig)
		} else {
			c.startAgent(t, n)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpAnnounceLogs(t)
		}
	})
	pool := &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "announce", Labels: map[string]string{"pool": "announce"}},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{announcePool.String()}}}
	g.Expect(env.Client.Create(context.Background(), pool)).To(Succeed())
	return c, procs
}

// dumpAnnounceLogs shows what the agents' speakers said.
func (c *cluster) dumpAnnounceLogs(t *testing.T) {
	for _, n := range c.nodes {
		b, _ := os.ReadFile(filepath.Join(c.logDir, n.Name+".log"))
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "announce") && !strings.Contains(line, "Heard peer") {
				t.Logf("%s: %s", n.Name, line)
			}
		}
	}
}

// announcedBy is the node the Service's condition says answers for it.
func announcedBy(g Gomega, c *cluster, svc *corev1.Service) string {
	var got corev1.Service
	g.Expect(c.env.Client.Get(context.Background(), client.ObjectKeyFromObject(svc), &got)).To(Succeed())
	cond := apimeta.FindStatusCondition(got.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
	g.Expect(cond).NotTo(BeNil(), "no %s condition yet", svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
	g.Expect(cond.Status).To(Equal(metav1.ConditionTrue), "%+v", cond)
	for _, n := range c.nodes {
		if strings.Contains(cond.Message, " answered by "+n.Name+" ") {
			return n.Name
		}
	}
	return cond.Message
}

func lbAddress(g Gomega, c *cluster, svc *corev1.Service) netip.Addr {
	var got corev1.Service
	g.Expect(c.env.Client.Get(context.Background(), client.ObjectKeyFromObject(svc), &got)).To(Succeed())
	g.Expect(got.Status.LoadBalancer.Ingress).NotTo(BeEmpty())
	return netip.MustParseAddr(got.Status.LoadBalancer.Ingress[0].IP)
}

// TestAnnounceL2 runs agents announcing by L2 end to end: one node
// answers, the Service says which; its Node deleted, the address moves;
// under Local it follows the endpoints; an announcement naming an
// interface no node has announces nothing and takes nothing away. A
// listener on the segment checks that never two nodes answered at once.
func TestAnnounceL2(t *testing.T) {
	requireKernel(t)
	c, _ := startAnnounceCluster(t, false)
	ctx := context.Background()
	g := NewWithT(t)
	ann := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "l2"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeL2,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "announce"}}}}
	g.Expect(c.env.Client.Create(ctx, ann)).To(Succeed())
	ns, err := c.env.Namespace(ctx, "announce")
	g.Expect(err).NotTo(HaveOccurred())
	outside := netlab.Client(c.client, time.Second)
	names := []string{"node1", "node2", "node3"}

	// served waits until the client reaches addr and the Service names
	// want as its announcer.
	served := func(t *testing.T, svc *corev1.Service, addr netip.Addr, want string) {
		t.Helper()
		NewWithT(t).Eventually(func(g Gomega) {
			_, err := netlab.Get(ctx, outside, "http://"+addr.String()+"/")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(announcedBy(g, c, svc)).To(Equal(want))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	}

	t.Run("Cluster: the first node by rank answers; its Node deleted, the next", func(t *testing.T) {
		g := NewWithT(t)
		for _, n := range c.nodes {
			c.addPods(t, ns, "web", n, 1)
		}
		svc := webService(ns, "web")
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc = c.service(t, svc)
		var addr netip.Addr
		g.Eventually(func(g Gomega) { addr = lbAddress(g, c, svc) }).WithTimeout(converge).Should(Succeed())
		w, err := segmentwatch.Start(c.client, "eth0", netip.MustParseAddr(clientIP), addr, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		rank := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, names)
		served(t, svc, addr, rank[0])

		var node corev1.Node
		g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: rank[0]}, &node)).To(Succeed())
		g.Expect(c.env.Client.Delete(ctx, &node)).To(Succeed())
		served(t, svc, addr, rank[1])
		for _, n := range c.nodes {
			if n.Name == rank[0] {
				c.createNode(t, n)
			}
		}
		served(t, svc, addr, rank[0])
		g.Expect(w.Doubles()).To(BeEmpty(), "two nodes answered at once")
	})

	t.Run("Local: the address follows the endpoints", func(t *testing.T) {
		g := NewWithT(t)
		svc := webService(ns, "local")
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc = c.service(t, svc)
		var addr netip.Addr
		g.Eventually(func(g Gomega) { addr = lbAddress(g, c, svc) }).WithTimeout(converge).Should(Succeed())
		w, err := segmentwatch.Start(c.client, "eth0", netip.MustParseAddr(clientIP), addr, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// The endpoint on the last-ranked node: the rank alone would
		// never choose it.
		last := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, names)[2]
		other := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, names)[0]
		pods := c.addPods(t, ns, "local", nodeNamed(c, last), 1)
		served(t, svc, addr, last)

		c.addPods(t, ns, "local", nodeNamed(c, other), 1)
		g.Expect(c.env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pods[0].Name}},
			&client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
		served(t, svc, addr, other)
		g.Expect(w.Doubles()).To(BeEmpty(), "two nodes answered at once")
	})

	t.Run("an unknown interface announces nothing and takes nothing away", func(t *testing.T) {
		g := NewWithT(t)
		pool := &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "nowhere", Labels: map[string]string{"pool": "nowhere"}},
			Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.79.0/30"}, Priority: 10,
				ServiceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "nowhere"}}}}
		g.Expect(c.env.Client.Create(ctx, pool)).To(Succeed())
		bad := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "eth9"},
			Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeL2, Interfaces: []string{"eth9"},
				PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "nowhere"}}}}
		g.Expect(c.env.Client.Create(ctx, bad)).To(Succeed())
		svc := webService(ns, "web")
		svc.Name = "nowhere"
		svc.Labels = map[string]string{"pool": "nowhere"}
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc = c.service(t, svc)
		g.Eventually(func(g Gomega) {
			events, err := c.env.Events(ctx, "svcnet-agent", bad.UID, announce.EventInterfaceNotFound)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(len(events)).To(BeNumerically(">=", 3), "one Warning per node")
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		// No node took its address, and the other Service's address is
		// still answered, by the same node.
		var got corev1.Service
		g.Eventually(func(g Gomega) {
			g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &got)).To(Succeed())
			g.Expect(got.Status.LoadBalancer.Ingress).To(ConsistOf(HaveField("IP", HavePrefix("192.168.79."))))
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
		g.Expect(apimeta.FindStatusCondition(got.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)).To(BeNil())
		web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
		addr := lbAddress(g, c, web)
		served(t, web, addr, announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, names)[0])
	})
}

func nodeNamed(c *cluster, name string) *netlab.Node {
	i := slices.IndexFunc(c.nodes, func(n *netlab.Node) bool { return n.Name == name })
	return c.nodes[i]
}
