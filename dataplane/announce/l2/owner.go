// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"net/netip"
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
}

// peerState is what a segment knows of one peer from its heartbeats.
type peerState struct {
	heard         time.Time
	incarnation   uint64
	ready         bool
	leaving       bool
	announcements map[string]bool
	claims        map[netip.Addr]bool
}

func (p *peerState) update(h *Heartbeat, now time.Time) {
	p.heard, p.incarnation, p.ready, p.leaving = now, h.Incarnation, h.Ready, h.Leaving
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
		if !v.selfReady || !v.firstLive(w, !owned[w.Addr]) {
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
