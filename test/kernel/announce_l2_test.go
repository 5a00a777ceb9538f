// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2/textlogger"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/segmentwatch"
)

const (
	l2Interval  = 100 * time.Millisecond
	l2DeadAfter = 500 * time.Millisecond
	// l2Failover bounds a failover in these tests: the dead interval, one
	// interval and a connection, with room for a loaded machine.
	l2Failover = 3 * time.Second
)

var (
	vip4 = netip.MustParseAddr("192.168.61.1")
	vip6 = netip.MustParseAddr("fd00:61::1")
)

// l2Lab is three nodes and a client on one segment, each node running an
// L2 segment for eth0 that wants vip4 and vip6, and serving HTTP on both
// (a local route, so the kernel takes the packets without answering ARP
// or NDP for them: only the segments answer).
type l2Lab struct {
	lab    *netlab.Lab
	cfg    l2LabConfig
	nodes  []*netlab.Node
	client string
	macs   map[string]string // node -> MAC
	segs   map[string]*l2.Segment
	stops  map[string]context.CancelFunc
	log    logr.Logger
}

// l2LabConfig varies the lab's segments and fabric.
type l2LabConfig struct {
	// livenessPort turns the segments' UDP path on.
	livenessPort int
	// ready are the nodes the segments are told are Ready in the API.
	ready []string
	// dropFrames makes the fabric's bridge drop the heartbeat frames, as
	// port security or a virtual switch that passes only IP and ARP.
	dropFrames bool
}

// l2Nodes are the lab's node names.
var l2Nodes = []string{"node1", "node2", "node3"}

func newL2Lab(t *testing.T, cfg l2LabConfig) *l2Lab {
	t.Helper()
	lab, err := netlab.New(fmt.Sprintf("svcnet-l2%04d", rand.IntN(10000)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	l := &l2Lab{lab: lab, cfg: cfg, macs: map[string]string{}, segs: map[string]*l2.Segment{}, stops: map[string]context.CancelFunc{},
		log: textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(testWriter{t}), textlogger.Verbosity(2)))}
	for i := 1; i <= 3; i++ {
		n, err := lab.AddNode(fmt.Sprintf("node%d", i), netip.MustParsePrefix(fmt.Sprintf("192.168.60.%d/24", 10+i)), netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)))
		if err != nil {
			t.Fatal(err)
		}
		l.nodes = append(l.nodes, n)
		mustRun(t, lab, n.NetNS, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
		mustRun(t, lab, n.NetNS, "ip", "addr", "add", fmt.Sprintf("fd00:60::%d/64", 10+i), "dev", "eth0", "nodad")
		mustRun(t, lab, n.NetNS, "ip", "route", "add", "local", vip4.String(), "dev", "lo")
		mustRun(t, lab, n.NetNS, "ip", "-6", "route", "add", "local", vip6.String(), "dev", "lo")
		ln, err := netns.Listen(netlab.Path(n.NetNS), ":8080")
		if err != nil {
			t.Fatal(err)
		}
		name := n.Name
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, name) }), ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		_ = netns.Do(netlab.Path(n.NetNS), func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err == nil {
				l.macs[n.Name] = ifi.HardwareAddr.String()
			}
			return err
		})
	}
	if l.client, err = lab.AddClient("client", netip.MustParsePrefix("192.168.60.100/24")); err != nil {
		t.Fatal(err)
	}
	mustRun(t, lab, l.client, "ip", "addr", "add", "fd00:60::100/64", "dev", "eth0", "nodad")
	// The addresses are on the client's link: it asks the segment for them.
	mustRun(t, lab, l.client, "ip", "route", "add", "192.168.61.0/24", "dev", "eth0")
	mustRun(t, lab, l.client, "ip", "-6", "route", "add", "fd00:61::/64", "dev", "eth0")
	if cfg.dropFrames {
		dropHeartbeatFrames(t, lab)
	}
	for _, n := range l.nodes {
		l.start(t, n)
	}
	t.Cleanup(func() {
		for _, stop := range l.stops {
			stop()
		}
	})
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func mustRun(t *testing.T, lab *netlab.Lab, ns string, argv ...string) {
	t.Helper()
	if _, err := lab.Run(ns, argv...); err != nil {
		t.Fatal(err)
	}
}

// start runs node n's segment (a new incarnation, as a restarted agent).
func (l *l2Lab) start(t *testing.T, n *netlab.Node) {
	t.Helper()
	seg, err := l2.Open(l2.Config{
		Node: n.Name, Interface: "eth0", NetNS: netlab.Path(n.NetNS), LivenessPort: l.cfg.livenessPort,
		Interval: l2Interval, DeadAfter: l2DeadAfter, Incarnation: rand.Uint64(), Log: l.log.WithValues("node", n.Name),
	})
	if err != nil {
		t.Fatal(err)
	}
	peers := map[string][]netip.Addr{}
	for _, o := range l.nodes {
		peers[o.Name] = []netip.Addr{o.IP, netip.MustParseAddr(fmt.Sprintf("fd00:60::%d", o.IP.As4()[3]))}
	}
	seg.SetWants([]string{"l2"}, []l2.Want{
		{Addr: vip4, Announcement: "l2", Candidates: l2Nodes, Ready: l.cfg.ready},
		{Addr: vip6, Announcement: "l2", Candidates: l2Nodes, Ready: l.cfg.ready},
	}, peers)
	l.segs[n.Name] = seg
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { seg.Run(ctx); close(done) }()
	l.stops[n.Name] = func() { cancel(); <-done }
}

func (l *l2Lab) stop(name string) {
	if stop := l.stops[name]; stop != nil {
		stop()
		delete(l.stops, name)
	}
}

func (l *l2Lab) node(name string) *netlab.Node {
	for _, n := range l.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// setLink cuts or restores a node's link on the fabric's side, as a
// switch port going down.
func (l *l2Lab) setLink(t *testing.T, name, state string) {
	t.Helper()
	mustRun(t, l.lab, l.lab.Fabric(), "ip", "link", "set", "p-"+name, state)
}

// waitServedBy polls the address until a connection is answered by node
// want, and returns how long that took.
func (l *l2Lab) waitServedBy(t *testing.T, addr netip.Addr, want string) time.Duration {
	t.Helper()
	hc := netlab.Client(l.client, 200*time.Millisecond)
	url := "http://" + net.JoinHostPort(addr.String(), "8080") + "/"
	start := time.Now()
	last := ""
	for time.Since(start) < 3*l2Failover {
		body, err := netlab.Get(context.Background(), hc, url)
		if err == nil && body == want {
			return time.Since(start)
		}
		last = fmt.Sprint(body, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not served by %s within %s; last answer: %s", addr, want, 3*l2Failover, last)
	return 0
}

// neighbour is the client's neighbour entry for addr.
func (l *l2Lab) neighbour(t *testing.T, addr netip.Addr) string {
	t.Helper()
	out, _ := l.lab.Run(l.client, "ip", "neigh", "show", addr.String(), "dev", "eth0")
	return strings.TrimSpace(out)
}

// TestL2Announce proves L2 announcing on a real segment, for IPv4 (ARP)
// and IPv6 (NDP): exactly one node answers, the first by rank; its link
// cut, the next answers and the client's neighbour entry follows the
// gratuitous announcement; its link back, it takes the address back
// without two nodes ever answering; a stopped agent hands over at once.
func TestL2Announce(t *testing.T) {
	requireKernel(t)
	l := newL2Lab(t, l2LabConfig{})
	for _, addr := range []netip.Addr{vip4, vip6} {
		t.Run(map[bool]string{true: "IPv4-ARP", false: "IPv6-NDP"}[addr.Is4()], func(t *testing.T) {
			src := netip.MustParseAddr("192.168.60.100")
			if addr.Is6() {
				src = netip.MustParseAddr("fd00:60::100")
			}
			w, err := segmentwatch.Start(l.client, "eth0", src, addr, 10*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			rank := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, []string{"node1", "node2", "node3"})
			first, second := rank[0], rank[1]

			l.waitServedBy(t, addr, first)
			if got := w.CurrentIs(l.macs[first]); got != l.macs[first] {
				t.Errorf("answered by %s, want %s (%s)", got, l.macs[first], first)
			}
			if n := l.neighbour(t, addr); !strings.Contains(n, l.macs[first]) {
				t.Errorf("client's neighbour entry %q does not name %s", n, first)
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
			if n := l.neighbour(t, addr); !strings.Contains(n, l.macs[second]) {
				t.Errorf("client's neighbour entry %q does not follow to %s (%s)", n, second, l.macs[second])
			}

			l.setLink(t, first, "up")
			back := l.waitServedBy(t, addr, first)
			t.Logf("link of %s back: it answers again after %s (it listens %s first)", first, back, l2DeadAfter)

			l.stop(first)
			stopped := l.waitServedBy(t, addr, second)
			t.Logf("segment of %s stopped: %s answers after %s", first, second, stopped)
			l.start(t, l.node(first))
			l.waitServedBy(t, addr, first)

			if d := w.Doubles(); len(d) > 0 {
				t.Errorf("two nodes answered at once: %v", d)
			}
		})
	}
}
