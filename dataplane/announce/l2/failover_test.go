// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

func TestClaimHistoryTakeover(t *testing.T) {
	addr := netip.MustParseAddr("192.168.240.1")
	other := netip.MustParseAddr("2001:db8::1")
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// hb is a ready peer's heartbeat of incarnation 1.
	hb := func(node string, seq uint32, claims ...netip.Addr) *Heartbeat {
		return &Heartbeat{Node: node, Incarnation: 1, Seq: seq, Ready: true, Announcements: []string{"l2"}, Claims: claims}
	}
	tests := map[string]struct {
		steps func(c *claimHistory)
		// takenAt is when this node first announces addr.
		takenAt time.Time
		want    Takeover
	}{
		"a new address did not move": {
			steps:   func(*claimHistory) {},
			takenAt: at(0),
			want:    Takeover{Addr: addr, At: at(0)},
		},
		"heartbeats stopped: from the last that claimed it": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0))
				c.heard(hb("node-1", 2, addr), at(100))
			},
			takenAt: at(700),
			want:    Takeover{Addr: addr, At: at(700), From: "node-1", Reason: MovedPeerLost, Gap: 600 * time.Millisecond},
		},
		"let go and said so in the next heartbeat: from that heartbeat": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 5, addr), at(0))
				c.heard(hb("node-1", 6), at(40))
			},
			takenAt: at(41),
			want:    Takeover{Addr: addr, At: at(41), From: "node-1", Reason: MovedReleased, Gap: time.Millisecond},
		},
		"let go, heartbeats lost in between: from the last that claimed it": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 5, addr), at(0))
				c.heard(hb("node-1", 8), at(300))
			},
			takenAt: at(301),
			want:    Takeover{Addr: addr, At: at(301), From: "node-1", Reason: MovedReleased, Gap: 301 * time.Millisecond},
		},
		"its agent shutting down let go": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 5, addr), at(0))
				c.heard(&Heartbeat{Node: "node-1", Incarnation: 1, Seq: 6, Leaving: true}, at(50))
			},
			takenAt: at(50),
			want:    Takeover{Addr: addr, At: at(50), From: "node-1", Reason: MovedReleased},
		},
		"its agent restarted (a new incarnation): lost after its last claim": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 9, addr), at(0))
				c.heard(&Heartbeat{Node: "node-1", Incarnation: 2, Seq: 1, Announcements: []string{"l2"}}, at(200))
			},
			takenAt: at(200),
			want:    Takeover{Addr: addr, At: at(200), From: "node-1", Reason: MovedPeerLost, Gap: 200 * time.Millisecond},
		},
		"its link was down (listening again, same run): lost after its last claim": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 9, addr), at(0))
				c.heard(&Heartbeat{Node: "node-1", Incarnation: 1, Seq: 10, Announcements: []string{"l2"}}, at(400))
			},
			takenAt: at(400),
			want:    Takeover{Addr: addr, At: at(400), From: "node-1", Reason: MovedPeerLost, Gap: 400 * time.Millisecond},
		},
		"moved twice: from the node that answered last": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0)) // then dies
				c.heard(hb("node-3", 1, addr), at(600))
				c.heard(hb("node-3", 2), at(2000))
			},
			takenAt: at(2001),
			want:    Takeover{Addr: addr, At: at(2001), From: "node-3", Reason: MovedReleased, Gap: time.Millisecond},
		},
		"another address's claims say nothing of this one": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, other), at(0))
			},
			takenAt: at(700),
			want:    Takeover{Addr: addr, At: at(700)},
		},
		"a claim this node outlived while holding it, then let go itself: no move": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-3", 1, addr), at(0)) // a healed partition
				c.heard(hb("node-3", 2), at(100))     // node-3 yields
				c.released(addr)                      // later this node lets go too
			},
			takenAt: at(5000),
			want:    Takeover{Addr: addr, At: at(5000)},
		},
		"a claim that made this node let go still counts": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0))
				c.released(addr)
			},
			takenAt: at(600),
			want:    Takeover{Addr: addr, At: at(600), From: "node-1", Reason: MovedPeerLost, Gap: 600 * time.Millisecond},
		},
		"an address that left the wants and came back did not move": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0))
				c.want(nil)
				c.want([]Want{{Addr: addr}})
			},
			takenAt: at(600),
			want:    Takeover{Addr: addr, At: at(600)},
		},
		"an unwanted address's claims are not kept": {
			steps: func(c *claimHistory) {
				c.want(nil)
				c.heard(hb("node-1", 1, addr), at(0))
				c.want([]Want{{Addr: addr}})
			},
			takenAt: at(600),
			want:    Takeover{Addr: addr, At: at(600)},
		},
		"after this node's link went down nothing is known": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0))
				c.forget()
			},
			takenAt: at(600),
			want:    Takeover{Addr: addr, At: at(600)},
		},
		"a takeover is reported once": {
			steps: func(c *claimHistory) {
				c.heard(hb("node-1", 1, addr), at(0))
				c.takeover(addr, at(500))
			},
			takenAt: at(900),
			want:    Takeover{Addr: addr, At: at(900)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := newClaimHistory()
			c.want([]Want{{Addr: addr}, {Addr: other}})
			tc.steps(&c)
			got := c.takeover(addr, tc.takenAt)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("takeover (-want +got):\n%s", diff)
			}
			if got.Moved() != (tc.want.From != "") {
				t.Errorf("Moved() = %v with From %q", got.Moved(), got.From)
			}
		})
	}
}

// TestFailoverAsTheSegmentRunsIt drives decide and the claim history the
// way a Segment does (a heartbeat is recorded, then decided on; every
// interval a tick decides; a takeover is reported at the announcement),
// with a peer that answers for an address and then goes silent or lets
// go, and checks when this node takes the address and what it reports.
func TestFailoverAsTheSegmentRunsIt(t *testing.T) {
	addr := netip.MustParseAddr("192.168.240.1")
	order := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, []string{"a", "b"})
	first, second := order[0], order[1]
	const interval, dead = 100 * time.Millisecond, 500 * time.Millisecond
	wants := []Want{{Addr: addr, Announcement: "l2", Candidates: []string{first, second}}}
	tests := map[string]struct {
		// The first answers until its heartbeat at 1001 s; then it sends
		// nothing (it dies) or, with leave, its agent stops: one more
		// heartbeat 30 ms later, leaving and claiming nothing.
		leave bool
		want  Takeover
	}{
		"the owner dies: taken at the first tick a dead interval after its last heartbeat": {
			want: Takeover{Addr: addr, At: time.Unix(1001, int64(dead)), From: first, Reason: MovedPeerLost, Gap: dead},
		},
		"the owner's agent stops and lets go: taken at once": {
			leave: true,
			want:  Takeover{Addr: addr, At: time.Unix(1001, int64(30*time.Millisecond)), From: first, Reason: MovedReleased},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(990, 0)
			peers := map[string]*peerState{}
			claims := newClaimHistory()
			claims.want(wants)
			owned := map[netip.Addr]bool{}
			var takeovers []Takeover
			decideNow := func() {
				next := decide(view{self: second, selfReady: true, now: now, deadAfter: dead, peers: peers}, wants, owned)
				for a := range owned {
					if !next[a] {
						claims.released(a)
					}
				}
				for a := range next {
					if !owned[a] {
						takeovers = append(takeovers, claims.takeover(a, now))
					}
				}
				owned = next
			}
			receive := func(h *Heartbeat) {
				if peers[h.Node] == nil {
					peers[h.Node] = &peerState{}
				}
				peers[h.Node].update(h, now)
				claims.heard(h, now)
				decideNow()
			}
			seq := uint32(0)
			for !now.After(time.Unix(1001, 0)) {
				seq++
				receive(&Heartbeat{Node: first, Incarnation: 7, Seq: seq, Ready: true, Announcements: []string{"l2"}, Claims: []netip.Addr{addr}})
				now = now.Add(interval / 2)
				decideNow() // this node's tick, half an interval after
				now = now.Add(interval / 2)
			}
			if len(takeovers) != 0 {
				t.Fatalf("took %v while the first claimed it", takeovers)
			}
			now = time.Unix(1001, 0)
			if tc.leave {
				now = now.Add(30 * time.Millisecond)
				receive(&Heartbeat{Node: first, Incarnation: 7, Seq: seq + 1, Leaving: true, Announcements: []string{"l2"}})
			}
			for range 20 {
				if len(takeovers) > 0 {
					break
				}
				now = now.Add(interval)
				decideNow()
			}
			if diff := cmp.Diff([]Takeover{tc.want}, takeovers, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("takeovers (-want +got):\n%s", diff)
			}
		})
	}
}
