// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svcnet-io/svcnet/dataplane/announce/bfd"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
)

func resetFailoverMetrics(t *testing.T) {
	t.Helper()
	reset := func() {
		metricFailover.Reset()
		metricLastFailover.Reset()
		failoverSeries.Lock()
		clear(failoverSeries.addrs)
		failoverSeries.Unlock()
	}
	reset()
	t.Cleanup(reset)
}

// TestTakeoversObserved reports, as a segment does, one address that
// moved here from a dead node, one let go of by a live one, and one new
// address, and checks the failover series and what the Event will say.
func TestTakeoversObserved(t *testing.T) {
	resetFailoverMetrics(t)
	lost, released, fresh := netip.MustParseAddr("192.168.240.1"), netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("192.168.240.9")
	at := time.Unix(1700000000, 250_000_000)
	s := &Speaker{log: logr.Discard(), report: newReportWriter(nil, nil, nil, nil, "node-2", logr.Discard()), trigger: make(chan struct{}, 1)}

	s.segmentChanged("eth0", []l2.Takeover{
		{Addr: lost, At: at, From: "node-1", Reason: l2.MovedPeerLost, Gap: 620 * time.Millisecond},
		{Addr: released, At: at, From: "node-3", Reason: l2.MovedReleased, Gap: 300 * time.Microsecond},
		{Addr: fresh, At: at},
	}, nil)

	const want = `
# HELP svcnet_announce_last_failover_timestamp_seconds When this node last took an L2 address over from another node (Unix time of its first announcement).
# TYPE svcnet_announce_last_failover_timestamp_seconds gauge
svcnet_announce_last_failover_timestamp_seconds{address="192.168.240.1"} 1.70000000025e+09
svcnet_announce_last_failover_timestamp_seconds{address="2001:db8::1"} 1.70000000025e+09
`
	if err := testutil.CollectAndCompare(metricLastFailover, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The buckets a sample falls in show the series and the value.
	const wantHist = `
# HELP svcnet_announce_failover_seconds How long an L2 address may have gone unanswered when this node took it over from another node, by why that node stopped (peer-lost, released): from its last heartbeat claiming the address, or the one letting go of it, to this node's first gratuitous ARP or unsolicited NA.
# TYPE svcnet_announce_failover_seconds histogram
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.001"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.005"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.01"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.05"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.1"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.25"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.5"} 0
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="0.75"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="1"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="1.5"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="2.5"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="5"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="10"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="30"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="60"} 1
svcnet_announce_failover_seconds_bucket{address="192.168.240.1",reason="peer-lost",le="+Inf"} 1
svcnet_announce_failover_seconds_sum{address="192.168.240.1",reason="peer-lost"} 0.62
svcnet_announce_failover_seconds_count{address="192.168.240.1",reason="peer-lost"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.001"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.005"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.01"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.05"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.1"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.25"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.5"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="0.75"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="1"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="1.5"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="2.5"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="5"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="10"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="30"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="60"} 1
svcnet_announce_failover_seconds_bucket{address="2001:db8::1",reason="released",le="+Inf"} 1
svcnet_announce_failover_seconds_sum{address="2001:db8::1",reason="released"} 0.0003
svcnet_announce_failover_seconds_count{address="2001:db8::1",reason="released"} 1
`
	if err := testutil.CollectAndCompare(metricFailover, strings.NewReader(wantHist)); err != nil {
		t.Error(err)
	}

	wantQueue := []l2Change{
		{addr: lost, iface: "eth0", taken: true, at: at, from: "node-1", reason: l2.MovedPeerLost, gap: 620 * time.Millisecond},
		{addr: released, iface: "eth0", taken: true, at: at, from: "node-3", reason: l2.MovedReleased, gap: 300 * time.Microsecond},
		{addr: fresh, iface: "eth0", taken: true, at: at},
	}
	if diff := cmp.Diff(wantQueue, s.report.queue, cmp.AllowUnexported(l2Change{}), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("status reports (-want +got):\n%s", diff)
	}

	// An address that leaves the plan loses its series; one that stays
	// gets a zero series for the reason it has not moved for.
	syncFailoverSeries([]netip.Addr{released})
	if n := testutil.CollectAndCount(metricFailover); n != 2 {
		t.Errorf("failover series after %s left: %d, want 2 (%s's, both reasons)", lost, n, released)
	}
	if n := testutil.CollectAndCount(metricLastFailover); n != 1 {
		t.Errorf("last failover series after %s left: %d, want 1", lost, n)
	}
}

func TestAnnouncedMessage(t *testing.T) {
	addr := netip.MustParseAddr("192.168.240.1")
	const part = "192.168.240.1 answered by node-2 (ARP on eth0)"
	tests := map[string]struct {
		change l2Change
		want   string
	}{
		"a new address": {
			change: l2Change{addr: addr, taken: true},
			want:   part,
		},
		"from a dead node": {
			change: l2Change{addr: addr, taken: true, from: "node-1", reason: l2.MovedPeerLost, gap: 612400 * time.Microsecond},
			want:   part + ", taken over from node-1, whose heartbeats stopped: unanswered for at most 613ms",
		},
		"let go of by a live node": {
			change: l2Change{addr: addr, taken: true, from: "node-3", reason: l2.MovedReleased, gap: 200 * time.Microsecond},
			want:   part + ", taken over from node-3, which let go of it: unanswered for at most 1ms",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := announcedMessage(part, tc.change); got != tc.want {
				t.Errorf("message = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFailoverSeriesBornAtZero: an address in the plan has its failover
// series at zero before it ever moves, so that its first move is an
// increase to rate() and increase() (the failover alert), and loses them
// when it leaves the plan.
func TestFailoverSeriesBornAtZero(t *testing.T) {
	resetFailoverMetrics(t)
	a, b := netip.MustParseAddr("192.168.240.1"), netip.MustParseAddr("192.168.240.2")
	syncFailoverSeries([]netip.Addr{a, b})
	if n := testutil.CollectAndCount(metricFailover); n != 4 {
		t.Fatalf("failover series of 2 planned addresses: %d, want 4 (2 reasons each)", n)
	}
	observeFailover(l2.Takeover{Addr: a, At: time.Unix(1700000000, 0), From: "node-1", Reason: l2.MovedPeerLost, Gap: 600 * time.Millisecond})
	syncFailoverSeries([]netip.Addr{a, b}) // a sync keeps the counts
	const want = `
# HELP svcnet_announce_failover_seconds How long an L2 address may have gone unanswered when this node took it over from another node, by why that node stopped (peer-lost, released): from its last heartbeat claiming the address, or the one letting go of it, to this node's first gratuitous ARP or unsolicited NA.
# TYPE svcnet_announce_failover_seconds histogram
`
	var sb strings.Builder
	sb.WriteString(want)
	if err := testutil.CollectAndCompare(metricFailover, strings.NewReader(sb.String()+failoverLines(a, l2.MovedPeerLost, 0.6)+failoverLines(a, l2.MovedReleased, -1)+failoverLines(b, l2.MovedPeerLost, -1)+failoverLines(b, l2.MovedReleased, -1))); err != nil {
		t.Error(err)
	}
	syncFailoverSeries([]netip.Addr{b})
	if n := testutil.CollectAndCount(metricFailover); n != 2 {
		t.Errorf("failover series after %s left the plan: %d, want 2", a, n)
	}
}

// failoverLines is the exposition of one failover series: one sample of
// v seconds, or none when v < 0.
func failoverLines(a netip.Addr, r l2.MoveReason, v float64) string {
	var sb strings.Builder
	n, sum := 0, 0.0
	if v >= 0 {
		n, sum = 1, v
	}
	for _, b := range FailoverBuckets {
		c := 0
		if v >= 0 && v <= b {
			c = 1
		}
		fmt.Fprintf(&sb, "svcnet_announce_failover_seconds_bucket{address=%q,reason=%q,le=%q} %d\n", a, r, strconv.FormatFloat(b, 'g', -1, 64), c)
	}
	fmt.Fprintf(&sb, "svcnet_announce_failover_seconds_bucket{address=%q,reason=%q,le=\"+Inf\"} %d\n", a, r, n)
	fmt.Fprintf(&sb, "svcnet_announce_failover_seconds_sum{address=%q,reason=%q} %v\n", a, r, sum)
	fmt.Fprintf(&sb, "svcnet_announce_failover_seconds_count{address=%q,reason=%q} %d\n", a, r, n)
	return sb.String()
}

// TestBFDMetrics follows a session Down, Init, Up, Down and a sync that
// no longer has it: the gauge says whether it is Up, the counter counts
// each state entered, and a peer without BFD has no gauge.
func TestBFDMetrics(t *testing.T) {
	metricBFDSessionUp.Reset()
	metricBFDTransitions.Reset()
	t.Cleanup(func() { metricBFDSessionUp.Reset(); metricBFDTransitions.Reset() })
	peer := netip.MustParseAddr("192.168.50.254")
	for _, step := range [][2]bfd.State{{bfd.StateDown, bfd.StateInit}, {bfd.StateInit, bfd.StateUp}} {
		observeBFDChange(bfd.Change{Peer: peer, From: step[0], To: step[1]})
	}
	const up = `
# HELP svcnet_announce_bfd_session_up 1 when the BFD session with the BGP peer is Up, 0 otherwise; only peers with bfd set have one.
# TYPE svcnet_announce_bfd_session_up gauge
svcnet_announce_bfd_session_up{peer="192.168.50.254"} 1
`
	if err := testutil.CollectAndCompare(metricBFDSessionUp, strings.NewReader(up)); err != nil {
		t.Error(err)
	}
	observeBFDChange(bfd.Change{Peer: peer, From: bfd.StateUp, To: bfd.StateDown, Diag: bfd.DiagDetectionExpired})
	const transitions = `
# HELP svcnet_announce_bfd_session_transitions_total State changes of the BFD session with the BGP peer, by the state entered (AdminDown, Down, Init, Up).
# TYPE svcnet_announce_bfd_session_transitions_total counter
svcnet_announce_bfd_session_transitions_total{peer="192.168.50.254",state="Down"} 1
svcnet_announce_bfd_session_transitions_total{peer="192.168.50.254",state="Init"} 1
svcnet_announce_bfd_session_transitions_total{peer="192.168.50.254",state="Up"} 1
`
	if err := testutil.CollectAndCompare(metricBFDTransitions, strings.NewReader(transitions)); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(metricBFDSessionUp.WithLabelValues(peer.String())); got != 0 {
		t.Errorf("svcnet_announce_bfd_session_up after Down = %v, want 0", got)
	}
	syncBFDSeries(map[netip.Addr]bfd.State{})
	if n := testutil.CollectAndCount(metricBFDSessionUp); n != 0 {
		t.Errorf("%d svcnet_announce_bfd_session_up series after the peer left, want 0", n)
	}
}
