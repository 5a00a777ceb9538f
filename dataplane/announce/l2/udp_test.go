// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"math"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUDPPeers(t *testing.T) {
	onLink := []netip.Prefix{netip.MustParsePrefix("192.168.60.0/24"), netip.MustParsePrefix("fd00:60::/64")}
	tests := map[string]struct {
		peers map[string][]netip.Addr
		want  []peerAddr
	}{
		"none": {},
		"on-link addresses of both families, self left out": {
			peers: map[string][]netip.Addr{
				"self":  {netip.MustParseAddr("192.168.60.10")},
				"node2": {netip.MustParseAddr("192.168.60.12"), netip.MustParseAddr("fd00:60::12")},
				"node3": {netip.MustParseAddr("::ffff:192.168.60.13")},
			},
			want: []peerAddr{
				{node: "node2", addr: netip.MustParseAddr("192.168.60.12")},
				{node: "node3", addr: netip.MustParseAddr("192.168.60.13")},
				{node: "node2", addr: netip.MustParseAddr("fd00:60::12")},
			},
		},
		"a peer behind a router is on another segment": {
			peers: map[string][]netip.Addr{"far": {netip.MustParseAddr("10.1.0.5")}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := udpPeers("self", tc.peers, onLink)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(peerAddr{}), cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromPeer(t *testing.T) {
	peers := []peerAddr{{node: "node2", addr: netip.MustParseAddr("192.168.60.12")}}
	tests := map[string]struct {
		src  string
		node string
		want bool
	}{
		"the node's own address":                 {src: "192.168.60.12", node: "node2", want: true},
		"the node's address, v4-mapped":          {src: "::ffff:192.168.60.12", node: "node2", want: true},
		"another node's address speaking for it": {src: "192.168.60.13", node: "node2"},
		"the node's address naming another node": {src: "192.168.60.12", node: "node3"},
		"an address off the segment":             {src: "10.9.9.9", node: "node2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fromPeer(peers, netip.MustParseAddr(tc.src), tc.node); got != tc.want {
				t.Errorf("fromPeer = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHeartbeatBothPaths is one heartbeat as frames and as datagrams, cut
// for their path's room, put together by one assembler from either.
func TestHeartbeatBothPaths(t *testing.T) {
	h := &Heartbeat{Node: "node-2", Incarnation: 9, Seq: 3, Ready: true, Announcements: []string{"l2"}}
	for i := range 400 {
		h.Claims = append(h.Claims, netip.AddrFrom4([4]byte{192, 168, byte(i / 256), byte(i)}))
	}
	const mtu = 1500
	frames, err := h.encode(mtu)
	if err != nil {
		t.Fatal(err)
	}
	grams, err := h.encode(mtu - udpOverhead)
	if err != nil {
		t.Fatal(err)
	}
	if len(grams) < 2 {
		t.Fatalf("%d datagrams: the test wants a heartbeat of several", len(grams))
	}
	var a assembler
	var got []*Heartbeat
	// Interleaved, as they arrive on a segment that passes both.
	for i := range max(len(frames), len(grams)) {
		for _, p := range []struct {
			key   string
			parts [][]byte
			room  int
		}{{"aa:bb:cc:dd:ee:ff", frames, mtu}, {"udp 192.168.60.12", grams, mtu - udpOverhead}} {
			if i >= len(p.parts) {
				continue
			}
			if len(p.parts[i]) > p.room {
				t.Fatalf("%s part %d is %d bytes, more than %d", p.key, i, len(p.parts[i]), p.room)
			}
			hb, err := a.add(p.key, p.parts[i])
			if err != nil {
				t.Fatal(err)
			}
			if hb != nil {
				got = append(got, hb)
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("assembled %d heartbeats, want one per path", len(got))
	}
	for _, g := range got {
		if diff := cmp.Diff(h, g, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

// TestPeerStateStale: the copy of a heartbeat heard on the second path,
// or an older one overtaken, must not set a peer's claims back.
func TestPeerStateStale(t *testing.T) {
	tests := map[string]struct {
		lastInc uint64
		lastSeq uint32
		h       Heartbeat
		stale   bool
	}{
		"next":                            {lastInc: 1, lastSeq: 5, h: Heartbeat{Incarnation: 1, Seq: 6}},
		"several later (some lost)":       {lastInc: 1, lastSeq: 5, h: Heartbeat{Incarnation: 1, Seq: 9}},
		"the same again (other path)":     {lastInc: 1, lastSeq: 5, h: Heartbeat{Incarnation: 1, Seq: 5}, stale: true},
		"an older one overtaken":          {lastInc: 1, lastSeq: 5, h: Heartbeat{Incarnation: 1, Seq: 4}, stale: true},
		"a new incarnation starts afresh": {lastInc: 1, lastSeq: 5, h: Heartbeat{Incarnation: 2, Seq: 1}},
		"across the wrap of seq":          {lastInc: 1, lastSeq: math.MaxUint32, h: Heartbeat{Incarnation: 1, Seq: 0}},
		"before the wrap, heard after it": {lastInc: 1, lastSeq: 1, h: Heartbeat{Incarnation: 1, Seq: math.MaxUint32}, stale: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &peerState{incarnation: tc.lastInc, seq: tc.lastSeq}
			if got := p.stale(&tc.h); got != tc.stale {
				t.Errorf("stale = %v, want %v", got, tc.stale)
			}
		})
	}
}
