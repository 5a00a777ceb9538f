// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
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
func (l *l2Lab) watch(t *testing.T, addr netip.Addr) *segmentWatch {
	t.Helper()
	src := netip.MustParseAddr("192.168.60.100")
	if addr.Is6() {
		src = netip.MustParseAddr("fd00:60::100")
	}
	w, err := watchSegment(l.client, "eth0", src, addr, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// answerers waits a few dead intervals (the segments settled) and
// returns the nodes that answered for the watched address since.
func (l *l2Lab) answerers(w *segmentWatch) (nodes []string, doubles []string) {
	since := time.Now()
	time.Sleep(4 * l2DeadAfter)
	for _, n := range l2Nodes {
		if answeredSince(w, l.macs[n], since) {
			nodes = append(nodes, n)
		}
	}
	return nodes, w.Doubles()
}

// answeredSince tells whether hw answered a question asked after since.
func answeredSince(w *segmentWatch, hw string, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for r, hws := range w.answers {
		if hws[hw] && !w.asked[r].Before(since) {
			return true
		}
	}
	return false
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
