// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/segmentwatch"
)

// l2LivenessPort is the UDP path's port in these tests.
const l2LivenessPort = 7947

// dropHeartbeatFrames makes the fabric's bridge drop every frame of the
// heartbeats' EtherType, counting them.
func dropHeartbeatFrames(t *testing.T, lab *netlab.Lab) {
	t.Helper()
	mustRun(t, lab, lab.Fabric(), "nft", "add table bridge svcnet_test")
	mustRun(t, lab, lab.Fabric(), "nft", "add chain bridge svcnet_test forward { type filter hook forward priority 0 ; }")
	mustRun(t, lab, lab.Fabric(), "nft", "add rule bridge svcnet_test forward ether type 0x88b5 counter drop")
}

// droppedFrames is how many heartbeat frames the bridge dropped.
func droppedFrames(t *testing.T, lab *netlab.Lab) int {
	t.Helper()
	out, err := lab.Run(lab.Fabric(), "nft", "list chain bridge svcnet_test forward")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no counter in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// watch watches who answers for addr from the lab's client.
func (l *l2Lab) watch(t *testing.T, addr netip.Addr) *segmentwatch.Watch {
	t.Helper()
	src := netip.MustParseAddr("192.168.60.100")
	if addr.Is6() {
		src = netip.MustParseAddr("fd00:60::100")
	}
	w, err := segmentwatch.Start(l.client, "eth0", src, addr, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// answerers waits a few dead intervals (the segments settled) and
// returns the nodes that answered for the watched address since.
func (l *l2Lab) answerers(w *segmentwatch.Watch) (nodes []string, doubles []string) {
	since := time.Now()
	time.Sleep(4 * l2DeadAfter)
	for _, n := range l2Nodes {
		if w.AnsweredSince(l.macs[n], since) {
			nodes = append(nodes, n)
		}
	}
	return nodes, w.Doubles()
}

// TestL2AnnounceFramesDropped is issue #47: a segment that drops the
// heartbeat frames (EtherType 0x88B5). Without a second path every node
// hears nobody and, unguarded, every node answers for every address.
// With the UDP path exactly one node answers, the first by rank, and
// the next takes over when its link is cut. Without the UDP path the
// guard still keeps one answer per address: a node that hears nobody
// while others are Ready in the API answers only if it is the first of
// them, and the others report what they hold back.
func TestL2AnnounceFramesDropped(t *testing.T) {
	requireKernel(t)
	for _, addr := range []netip.Addr{vip4, vip6} {
		rank := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, l2Nodes)
		first, second := rank[0], rank[1]
		family := map[bool]string{true: "IPv4-ARP", false: "IPv6-NDP"}[addr.Is4()]

		t.Run(family+"/UDP-path", func(t *testing.T) {
			l := newL2Lab(t, l2LabConfig{livenessPort: l2LivenessPort, ready: l2Nodes, dropFrames: true})
			w := l.watch(t, addr)
			l.waitServedBy(t, addr, first)
			if got, doubles := l.answerers(w); len(got) != 1 || got[0] != first || len(doubles) > 0 {
				t.Errorf("answered by %v (doubles %v), want only %s", got, doubles, first)
			}
			if n := droppedFrames(t, l.lab); n == 0 {
				t.Fatal("the bridge dropped no heartbeat frame: the test proves nothing")
			}
			for _, n := range l2Nodes {
				if p := l.segs[n].Peers(); p != 2 {
					t.Errorf("%s hears %d peers, want 2 (over UDP)", n, p)
				}
				if held := l.segs[n].HeldBack(); len(held) > 0 {
					t.Errorf("%s holds back %v while it hears its peers", n, held)
				}
			}

			cut := time.Now()
			l.setLink(t, first, "down")
			took := l.waitServedBy(t, addr, second)
			t.Logf("link of %s cut: served by %s after %s", first, second, took)
			if took > l2Failover {
				t.Errorf("failover took %s, more than %s", took, l2Failover)
			}
			if _, ok := w.ChangedTo(l.macs[second], cut); !ok {
				t.Errorf("the segment never heard %s answer", second)
			}
			if got, doubles := l.answerers(w); len(got) != 1 || got[0] != second || len(doubles) > 0 {
				t.Errorf("after the cut answered by %v (doubles %v), want only %s", got, doubles, second)
			}

			l.setLink(t, first, "up")
			l.waitServedBy(t, addr, first)
			if got, _ := l.answerers(w); len(got) != 1 || got[0] != first {
				t.Errorf("link back: answered by %v, want only %s", got, first)
			}
			if d := w.Doubles(); len(d) > 0 {
				t.Errorf("two nodes answered at once: %v", d)
			}
		})

		t.Run(family+"/frames-only-guarded", func(t *testing.T) {
			l := newL2Lab(t, l2LabConfig{ready: l2Nodes, dropFrames: true})
			w := l.watch(t, addr)
			l.waitServedBy(t, addr, first)
			if got, doubles := l.answerers(w); len(got) != 1 || got[0] != first || len(doubles) > 0 {
				t.Errorf("answered by %v (doubles %v), want only %s, the first Ready by rank", got, doubles, first)
			}
			for _, n := range l2Nodes {
				held := l.segs[n].HeldBack()
				if want := n != first; want != slices.Contains(held, addr) {
					t.Errorf("%s holds back %v; want %s held back: %v", n, held, addr, want)
				}
			}
		})

		// The control: the same segment unguarded (the API said nothing
		// of Ready nodes) is the split brain the guard prevents.
		t.Run(family+"/frames-only-unguarded", func(t *testing.T) {
			l := newL2Lab(t, l2LabConfig{dropFrames: true})
			w := l.watch(t, addr)
			if got, _ := l.answerers(w); len(got) != len(l2Nodes) {
				t.Errorf("answered by %v; every node should (the split brain of issue #47)", got)
			}
		})
	}
}

// TestAnnounceL2FramesDropped runs the agents end to end on a segment
// that drops the heartbeat frames: with the UDP path (the agents'
// default) one node answers, the first by rank, and the Service says so;
// agents that start where the UDP port is blocked too hear nobody from
// the start: the first Ready node still answers alone, and the others
// report what they hold back (their LoadBalancerNodeAnnouncement, a
// Warning Event on their Node, a note in the Service's condition). (A
// node that has heard its peers and then hears none takes over: they
// died or were cut off, as in a link cut on a two-node segment.)
func TestAnnounceL2FramesDropped(t *testing.T) {
	requireKernel(t)
	c, _ := startAnnounceCluster(t, false)
	ctx := context.Background()
	g := NewWithT(t)
	for _, n := range c.nodes {
		var node corev1.Node
		g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node)).To(Succeed())
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		g.Expect(c.env.Client.Status().Update(ctx, &node)).To(Succeed())
	}
	dropHeartbeatFrames(t, c.lab)
	ann := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "l2"},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeL2,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "announce"}}}}
	g.Expect(c.env.Client.Create(ctx, ann)).To(Succeed())
	ns, err := c.env.Namespace(ctx, "announce")
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	svc := webService(ns, "web")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc = c.service(t, svc)
	var addr netip.Addr
	g.Eventually(func(g Gomega) { addr = lbAddress(g, c, svc) }).WithTimeout(converge).Should(Succeed())
	w, err := segmentwatch.Start(c.client, "eth0", netip.MustParseAddr(clientIP), addr, 10*time.Millisecond)
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Close()
	rank := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, l2Nodes)
	outside := netlab.Client(c.client, time.Second)
	served := func(g Gomega) {
		_, err := netlab.Get(ctx, outside, "http://"+addr.String()+"/")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(announcedBy(g, c, svc)).To(Equal(rank[0]))
	}

	// The UDP path: the agents hear each other, one answers.
	g.Eventually(served).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	time.Sleep(4 * l2DeadAfter) // settled: any second answerer would show
	g.Expect(w.Doubles()).To(BeEmpty(), "two nodes answered at once")
	g.Expect(w.Current()).To(Equal(hwOf(t, c, rank[0])))
	g.Expect(droppedFrames(t, c.lab)).To(BeNumerically(">", 0), "the bridge dropped no heartbeat frame: the test proves nothing")
	// Heard by UDP: hearing nobody, the others would hold back.
	var reports svcnetv1alpha1.LoadBalancerNodeAnnouncementList
	g.Expect(c.env.Client.List(ctx, &reports)).To(Succeed())
	for _, r := range reports.Items {
		g.Expect(r.Spec.HeldBack).To(BeEmpty(), "%s holds back while the UDP path works", r.Name)
	}

	// Agents that start with the UDP port blocked too: nobody hears
	// anybody, ever; the guard.
	for _, n := range c.nodes {
		c.stopAgent(n.Name)
	}
	mustRun(t, c.lab, c.lab.Fabric(), "nft", fmt.Sprintf("add rule bridge svcnet_test forward udp dport %d drop", announce.DefaultLivenessPort))
	for _, n := range c.nodes {
		c.startAgent(t, n)
	}
	for _, name := range rank[1:] {
		g.Eventually(func(g Gomega) {
			var report svcnetv1alpha1.LoadBalancerNodeAnnouncement
			g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: name}, &report)).To(Succeed())
			g.Expect(report.Spec.HeldBack).To(ContainElement(HaveField("Address", addr.String())))
			var node corev1.Node
			g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: name}, &node)).To(Succeed())
			events, err := c.env.Events(ctx, "svcnet-agent", node.UID, announce.EventPeersUnheard)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(events).NotTo(BeEmpty(), "no %s Event on %s", announce.EventPeersUnheard, name)
		}).WithTimeout(converge).WithPolling(poll).Should(Succeed(), "node %s", name)
	}
	g.Eventually(func(g Gomega) {
		served(g)
		var got corev1.Service
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &got)).To(Succeed())
		cond := apimeta.FindStatusCondition(got.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
		g.Expect(cond.Message).To(ContainSubstring("held back from " + addr.String()))
	}).WithTimeout(converge).WithPolling(poll).Should(Succeed())
	time.Sleep(4 * l2DeadAfter)
	g.Expect(w.Current()).To(Equal(hwOf(t, c, rank[0])))
	g.Expect(w.Doubles()).To(BeEmpty(), "two nodes answered at once")
}

// hwOf is the MAC address of node name's eth0.
func hwOf(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var hw string
	if err := netns.Do(netlab.Path(nodeNamed(c, name).NetNS), func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			hw = ifi.HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return hw
}
