// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"net/netip"
	"slices"
	"time"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// Want is an address this node should answer for on a segment if it wins
// it.
type Want struct {
	Addr netip.Addr
	// Announcement is the LoadBalancerAnnouncement that covers it; a peer
	// is a candidate only if its heartbeat says it serves it here.
	Announcement string
	// Candidates are the nodes that may answer for it, as the API says
	// (selected by the announcement, with a local endpoint under Local);
	// this node answers only if it is one of them.
	Candidates []string
	// Election is the announcement's: how the candidates rank.
	Election svcnetv1alpha1.L2NodeElection
	// Ready are the candidates whose Node is Ready in the API. A node that
	// hears no peer at all on the segment answers only if it is the first
	// of them by rank, or the only one (see holdsBack).
	Ready []string
}

// peerState is what a segment knows of one peer from its heartbeats.
type peerState struct {
	heard         time.Time
	incarnation   uint64
	seq           uint32
	ready         bool
	leaving       bool
	announcements map[string]bool
	claims        map[netip.Addr]bool
}

func (p *peerState) update(h *Heartbeat, now time.Time) {
	p.heard, p.incarnation, p.seq, p.ready, p.leaving = now, h.Incarnation, h.Seq, h.Ready, h.Leaving
	p.announcements = make(map[string]bool, len(h.Announcements))
	for _, a := range h.Announcements {
		p.announcements[a] = true
	}
	p.claims = make(map[netip.Addr]bool, len(h.Claims))
	for _, c := range h.Claims {
		p.claims[c] = true
	}
}

// view is one segment's knowledge at a moment.
type view struct {
	self      string
	selfReady bool
	now       time.Time
	deadAfter time.Duration
	peers     map[string]*peerState
	// heardBefore: some peer was heard on this segment since the segment
	// opened, so heartbeats are known to get through here.
	heardBefore bool
}

// stale tells whether h is not newer than what p was last told: the same
// heartbeat heard again on the other path (frame and UDP), or an older
// one overtaken on the way. Sequence numbers compare as serial numbers.
func (p *peerState) stale(h *Heartbeat) bool {
	return p.incarnation == h.Incarnation && int32(h.Seq-p.seq) <= 0
}

// alive tells whether a peer was heard within the dead interval.
func (v *view) alive(name string) *peerState {
	p := v.peers[name]
	if p == nil || v.now.Sub(p.heard) >= v.deadAfter {
		return nil
	}
	return p
}

// live tells whether peer node is a live candidate for w: alive, serving
// w's announcement, not leaving, and ready; or, when taking an address
// over, still listening before it answers: a node that is about to be
// ready and outranks this one would take the address right back.
func (v *view) live(node string, w Want, taking bool) bool {
	p := v.alive(node)
	return p != nil && !p.leaving && p.announcements[w.Announcement] && (p.ready || taking)
}

// decide returns the addresses this node answers for, given what it
// answers for now. For each wanted address, the first live candidate by
// rank should answer; if that is this node, it keeps an address it holds
// unless a live peer that outranks it claims it too (a healed partition:
// the lower-ranked lets go), and takes one it does not hold only when no
// live peer claims it any more (break before make: the previous owner
// lets go first and says so in a heartbeat).
func decide(v view, wants []Want, owned map[netip.Addr]bool) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, w := range wants {
		if !v.selfReady || !v.firstLive(w, !owned[w.Addr]) || v.holdsBack(w) {
			continue
		}
		blocked := false
		for name := range v.peers {
			p := v.alive(name)
			if p == nil || !p.claims[w.Addr] {
				continue
			}
			if !owned[w.Addr] || announcementpolicy.Outranks(w.Election, w.Addr, name, v.self) {
				blocked = true
				break
			}
		}
		if !blocked {
			out[w.Addr] = true
		}
	}
	return out
}

// firstLive tells whether this node is the first live candidate for w.
func (v *view) firstLive(w Want, taking bool) bool {
	isCandidate := false
	for _, c := range w.Candidates {
		if c == v.self {
			isCandidate = true
			continue
		}
		if v.live(c, w, taking) && announcementpolicy.Outranks(w.Election, w.Addr, c, v.self) {
			return false
		}
	}
	return isCandidate
}

// hearsPeer tells whether any peer at all was heard within the dead
// interval, on either path, whatever it serves.
func (v *view) hearsPeer() bool {
	for name := range v.peers {
		if v.alive(name) != nil {
			return true
		}
	}
	return false
}

// holdsBack tells whether this node must leave w alone because it has
// heard no peer at all since its segment opened while other candidates
// are Ready in the API. Hearing nobody from the start is then more likely
// the heartbeats being filtered (raw frames dropped, the UDP port closed)
// than every other node being down, and answering anyway would make every
// node answer for every address. Once a peer was heard, heartbeats are
// known to get through, and peers that fall silent later died or were
// cut off (a link cut on a two-node segment, whose Node stays Ready for
// a while): the node takes over at once, as it did before the guard. It
// then answers only if it is the first of the Ready candidates by rank:
// every node hearing nobody makes the same choice from the same API, so
// one node still answers. A node that is the only Ready candidate is
// truly alone and answers.
func (v *view) holdsBack(w Want) bool {
	if v.heardBefore || v.hearsPeer() {
		return false
	}
	self, others := false, false
	for _, n := range w.Ready {
		if !slices.Contains(w.Candidates, n) {
			continue
		}
		if n == v.self {
			self = true
			continue
		}
		others = true
		if announcementpolicy.Outranks(w.Election, w.Addr, n, v.self) {
			return true
		}
	}
	return others && !self
}

// heldBack are the addresses of wants that this node would answer for
// but holds back (holdsBack), sorted.
func heldBack(v view, wants []Want) []netip.Addr {
	var out []netip.Addr
	for _, w := range wants {
		if v.selfReady && slices.Contains(w.Candidates, v.self) && v.holdsBack(w) {
			out = append(out, w.Addr)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out)
}
