// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

func TestDecide(t *testing.T) {
	addr := netip.MustParseAddr("192.168.240.1")
	order := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, addr, []string{"a", "b", "c"})
	first, second, third := order[0], order[1], order[2]
	now := time.Unix(1000, 0)
	const dead = 500 * time.Millisecond
	peer := func(age time.Duration, claims ...netip.Addr) *peerState {
		p := &peerState{heard: now.Add(-age), ready: true, announcements: map[string]bool{"l2": true}, claims: map[netip.Addr]bool{}}
		for _, c := range claims {
			p.claims[c] = true
		}
		return p
	}
	want := []Want{{Addr: addr, Announcement: "l2", Candidates: []string{"a", "b", "c"}}}
	readyWant := func(ready ...string) []Want {
		return []Want{{Addr: addr, Announcement: "l2", Candidates: []string{"a", "b", "c"}, Ready: ready}}
	}
	tests := map[string]struct {
		self      string
		selfReady bool
		peers     map[string]*peerState
		owned     bool
		wants     []Want
		// heardBefore: a peer was heard earlier on the segment.
		heardBefore bool
		answer      bool
	}{
		"first of three, nobody claims: takes": {
			self: first, selfReady: true, peers: map[string]*peerState{second: peer(0), third: peer(0)}, answer: true,
		},
		"second while the first lives: no": {
			self: second, selfReady: true, peers: map[string]*peerState{first: peer(0), third: peer(0)},
		},
		"second once the first is dead: takes, its claim ignored": {
			self: second, selfReady: true, peers: map[string]*peerState{first: peer(dead, addr), third: peer(0)}, answer: true,
		},
		"not ready (listening after start or link up): never": {
			self: first, selfReady: false, peers: map[string]*peerState{}, owned: true,
		},
		"first, but a live peer still claims it: waits": {
			self: first, selfReady: true, peers: map[string]*peerState{second: peer(0, addr)},
		},
		"first and holding it, lower peer claims it too: keeps": {
			self: first, selfReady: true, peers: map[string]*peerState{second: peer(0, addr)}, owned: true, answer: true,
		},
		"holding it while a higher peer claims it (healed partition): lets go": {
			self: second, selfReady: true, peers: map[string]*peerState{first: peer(0, addr)}, owned: true,
		},
		"a higher peer that is not ready yet does not take it from the holder": {
			self: second, selfReady: true, peers: map[string]*peerState{first: {heard: now, announcements: map[string]bool{"l2": true}}}, owned: true, answer: true,
		},
		"but nobody takes it over under a higher peer that is about to be ready": {
			self: second, selfReady: true, peers: map[string]*peerState{first: {heard: now, announcements: map[string]bool{"l2": true}}},
		},
		"a higher peer that is leaving does not count": {
			self: second, selfReady: true, peers: map[string]*peerState{first: {heard: now, leaving: true, announcements: map[string]bool{"l2": true}, claims: map[netip.Addr]bool{}}}, answer: true,
		},
		"a higher peer that does not serve the announcement here does not count": {
			self: second, selfReady: true, peers: map[string]*peerState{first: {heard: now, ready: true, announcements: map[string]bool{"other": true}}}, answer: true,
		},
		"not a candidate (no local endpoint): never": {
			self: first, selfReady: true, owned: true,
			wants: []Want{{Addr: addr, Announcement: "l2", Candidates: []string{second, third}}},
		},
		"hearing nobody while others are Ready in the API, not first of them: holds back": {
			self: second, selfReady: true, wants: readyWant(first, second, third),
		},
		"hearing nobody, holding it, not first of the Ready: lets go": {
			self: second, selfReady: true, owned: true, wants: readyWant(first, second, third),
		},
		"hearing nobody, first of the Ready: takes": {
			self: first, selfReady: true, wants: readyWant(first, second, third), answer: true,
		},
		"hearing nobody, a higher candidate NotReady in the API: takes": {
			self: second, selfReady: true, wants: readyWant(second, third), answer: true,
		},
		"hearing nobody, the only Ready candidate (truly alone): takes": {
			self: third, selfReady: true, wants: readyWant(third), answer: true,
		},
		"hearing nobody, itself NotReady while others are Ready: holds back": {
			self: first, selfReady: true, wants: readyWant(second, third),
		},
		"hearing nobody, a Ready node that is no candidate does not count": {
			self: second, selfReady: true,
			wants: []Want{{Addr: addr, Announcement: "l2", Candidates: []string{second, third}, Ready: []string{first, second, third}}}, answer: true,
		},
		"hearing nobody, the higher Ready node's agent said it was leaving long ago (so it was heard): takes": {
			self: second, selfReady: true, wants: readyWant(first, second), heardBefore: true,
			peers: map[string]*peerState{first: {heard: now.Add(-time.Hour), leaving: true, announcements: map[string]bool{"l2": true}}}, answer: true,
		},
		"hearing nobody, the higher Ready node's agent fell silent without a word: holds back": {
			self: second, selfReady: true, wants: readyWant(first, second),
			peers: map[string]*peerState{first: {heard: now.Add(-time.Hour), ready: true, announcements: map[string]bool{"l2": true}}},
		},
		"hearing nobody now, having heard peers before (they died or were cut off): takes": {
			self: second, selfReady: true, wants: readyWant(first, second, third), heardBefore: true, answer: true,
		},
		"hearing any peer, even one serving nothing here: no holding back": {
			self: second, selfReady: true, wants: readyWant(first, second, third),
			peers: map[string]*peerState{third: {heard: now, ready: true, announcements: map[string]bool{"other": true}}}, answer: true,
		},
		"a higher node that the API says is no candidate does not count": {
			self: second, selfReady: true, peers: map[string]*peerState{first: peer(0)},
			wants: []Want{{Addr: addr, Announcement: "l2", Candidates: []string{second, third}}}, answer: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wants := tc.wants
			if wants == nil {
				wants = want
			}
			owned := map[netip.Addr]bool{}
			if tc.owned {
				owned[addr] = true
			}
			v := view{self: tc.self, selfReady: tc.selfReady, now: now, deadAfter: dead, peers: tc.peers, heardBefore: tc.heardBefore}
			got := decide(v, wants, owned)[addr]
			if got != tc.answer {
				t.Errorf("answers = %v, want %v", got, tc.answer)
			}
		})
	}
}

// TestDecideConverges runs three nodes' decisions against each other's
// claims, as heartbeats carry them, through joins, deaths and returns,
// and checks that no two ever answer for one address and that one does
// once the views settle.
func TestDecideConverges(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3"}
	var wants []Want
	for i := 1; i <= 20; i++ {
		wants = append(wants, Want{Addr: netip.AddrFrom4([4]byte{192, 168, 240, byte(i)}), Announcement: "l2", Candidates: nodes})
	}
	now := time.Unix(1000, 0)
	up := map[string]bool{"node-1": true, "node-2": true, "node-3": true}
	owned := map[string]map[netip.Addr]bool{}
	// step lets every up node decide in turn from the others' current
	// claims (one heartbeat each), and checks the invariant after each.
	step := func() {
		for _, self := range nodes {
			if !up[self] {
				continue
			}
			peers := map[string]*peerState{}
			for _, o := range nodes {
				if o != self && up[o] {
					peers[o] = &peerState{heard: now, ready: true, announcements: map[string]bool{"l2": true}, claims: owned[o]}
				}
			}
			owned[self] = decide(view{self: self, selfReady: true, now: now, deadAfter: time.Second, peers: peers}, wants, owned[self])
			for _, w := range wants {
				var holders []string
				for _, n := range nodes {
					if owned[n][w.Addr] {
						holders = append(holders, n)
					}
				}
				if len(holders) > 1 {
					t.Fatalf("%s answered by %v at once", w.Addr, holders)
				}
			}
		}
	}
	settled := func(what string) {
		t.Helper()
		for range 3 {
			step()
		}
		var live []string
		for _, n := range nodes {
			if up[n] {
				live = append(live, n)
			}
		}
		for _, w := range wants {
			r := announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, w.Addr, live)
			got := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return !owned[n][w.Addr] })
			if diff := cmp.Diff([]string{r[0]}, got); diff != "" {
				t.Errorf("%s: %s answered by (-want +got):\n%s", what, w.Addr, diff)
			}
		}
	}
	kill := func(names ...string) {
		for _, n := range names {
			up[n], owned[n] = false, nil // a dead node answers nothing
		}
	}
	settled("all up")
	kill("node-1")
	settled("node-1 dead")
	up["node-1"] = true
	settled("node-1 back")
	kill("node-2", "node-3")
	settled("two dead")
	up["node-2"], up["node-3"] = true, true
	settled("all back")
}

// TestHoldBackKeepsOneAnswer is a segment whose heartbeats are all
// filtered: no node hears another. Without the guard every node would
// answer for every address; with it exactly one does, the first Ready
// candidate, and each of the others reports the address held back.
func TestHoldBackKeepsOneAnswer(t *testing.T) {
	nodes := []string{"node-1", "node-2", "node-3"}
	tests := map[string]struct {
		ready []string
	}{
		"all Ready":               {ready: nodes},
		"one NotReady in the API": {ready: nodes[1:]},
		"only one Ready":          {ready: nodes[2:]},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var wants []Want
			for i := 1; i <= 20; i++ {
				wants = append(wants, Want{Addr: netip.AddrFrom4([4]byte{192, 168, 240, byte(i)}), Announcement: "l2", Candidates: nodes, Ready: tc.ready})
			}
			holders := map[netip.Addr][]string{}
			held := map[netip.Addr][]string{}
			for _, self := range nodes {
				v := view{self: self, selfReady: true, now: time.Unix(1000, 0), deadAfter: time.Second, peers: map[string]*peerState{}}
				for a := range decide(v, wants, map[netip.Addr]bool{}) {
					holders[a] = append(holders[a], self)
				}
				for _, a := range heldBack(v, wants) {
					held[a] = append(held[a], self)
				}
			}
			for _, w := range wants {
				want := announcementpolicy.Rank(w.Election, w.Addr, tc.ready)[0]
				if diff := cmp.Diff([]string{want}, holders[w.Addr]); diff != "" {
					t.Errorf("%s answered by (-want +got):\n%s", w.Addr, diff)
				}
				others := slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return n == want })
				if diff := cmp.Diff(others, held[w.Addr]); diff != "" {
					t.Errorf("%s held back by (-want +got):\n%s", w.Addr, diff)
				}
			}
		})
	}
}
