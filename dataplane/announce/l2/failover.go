// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"cmp"
	"net/netip"
	"time"
)

// MoveReason says why the node that answered for an address before this
// one stopped.
type MoveReason string

const (
	// MovedPeerLost means the previous owner's heartbeats stopped (its node,
	// agent or link died) or a restarted agent no longer claimed it.
	MovedPeerLost MoveReason = "peer-lost"
	// MovedReleased means the previous owner, still alive, let go of it (no
	// endpoint left under Local, no longer selected, shutting down).
	MovedReleased MoveReason = "released"
)

// Takeover is an address a segment took, and how it got there.
type Takeover struct {
	Addr netip.Addr
	// At is when this node first announced it (gratuitous ARP or
	// unsolicited NA), by the segment's clock.
	At time.Time
	// From is the peer that answered for it before; empty when none did
	// since this node last let go of it (a new address, or this node's
	// own again): not a move.
	From string
	// Reason is why From stopped answering.
	Reason MoveReason
	// Gap is from when From stopped answering, as far as its heartbeats
	// tell, to At: the longest any client may have gone unanswered.
	Gap time.Duration
}

// Moved tells whether the address came from another node.
func (t Takeover) Moved() bool { return t.From != "" }

// claimHistory remembers which peers claimed each wanted address and
// when they stopped, so that a takeover can tell where the address came
// from and how long it may have gone unanswered. Like decide it does no
// I/O: the segment feeds it heartbeats and its own changes.
type claimHistory struct {
	wanted map[netip.Addr]bool
	past   map[netip.Addr]map[string]*pastClaim // by address, then peer
}

// pastClaim is one peer's claim of one address.
type pastClaim struct {
	incarnation uint64
	seq         uint32    // of the last heartbeat that claimed it
	claimed     time.Time // when that heartbeat was heard
	// stopped is when it stopped answering, zero while it claims it.
	stopped time.Time
	reason  MoveReason
}

func newClaimHistory() claimHistory {
	return claimHistory{wanted: map[netip.Addr]bool{}, past: map[netip.Addr]map[string]*pastClaim{}}
}

// want sets the addresses worth remembering claims of, and forgets the
// others: an address that left and comes back (a Service deleted and
// made again) did not move.
func (c *claimHistory) want(wants []Want) {
	clear(c.wanted)
	for _, w := range wants {
		c.wanted[w.Addr] = true
	}
	for a := range c.past {
		if !c.wanted[a] {
			delete(c.past, a)
		}
	}
}

// heard records a peer's heartbeat: what it claims, and what it claimed
// before and no longer does. A live peer lets go and heartbeats at once,
// so when the heartbeat without the claim directly follows the last one
// with it, it marks when the peer stopped answering; when heartbeats were
// lost in between, the last one with it is the bound. A new incarnation,
// or a peer listening again (its link was down: it sent nothing while it
// let go), lost the address some time after its last heartbeat with it.
func (c *claimHistory) heard(h *Heartbeat, now time.Time) {
	claims := make(map[netip.Addr]bool, len(h.Claims))
	for _, a := range h.Claims {
		claims[a] = true
		if !c.wanted[a] {
			continue
		}
		if c.past[a] == nil {
			c.past[a] = map[string]*pastClaim{}
		}
		p := c.past[a][h.Node]
		if p == nil {
			p = &pastClaim{}
			c.past[a][h.Node] = p
		}
		*p = pastClaim{incarnation: h.Incarnation, seq: h.Seq, claimed: now}
	}
	for a, byPeer := range c.past {
		p := byPeer[h.Node]
		if p == nil || claims[a] || !p.stopped.IsZero() {
			continue
		}
		switch {
		case p.incarnation != h.Incarnation || !h.Ready && !h.Leaving:
			p.stopped, p.reason = p.claimed, MovedPeerLost
		case h.Seq == p.seq+1:
			p.stopped, p.reason = now, MovedReleased
		default:
			p.stopped, p.reason = p.claimed, MovedReleased
		}
	}
}

// forget drops every claim, as the segment forgets its peers when its
// link goes down.
func (c *claimHistory) forget() { clear(c.past) }

// released records that this node let go of a: a peer's claim it had
// outlived while holding it says nothing about a later takeover; a
// claim that still stands (a healed partition's higher peer) does.
func (c *claimHistory) released(a netip.Addr) {
	for peer, p := range c.past[a] {
		if !p.stopped.IsZero() {
			delete(c.past[a], peer)
		}
	}
}

// takeover reports this node's first announcement of a at now and starts
// a's history afresh. The address comes from the peer that stopped
// answering last. decide takes an address only when no live peer claims
// it, so a claim still standing is a dead peer's, stopped at its last
// heartbeat.
func (c *claimHistory) takeover(a netip.Addr, now time.Time) Takeover {
	t := Takeover{Addr: a, At: now}
	var last time.Time
	for peer, p := range c.past[a] {
		stopped, reason := p.stopped, p.reason
		if stopped.IsZero() {
			stopped, reason = p.claimed, MovedPeerLost
		}
		if t.From == "" || stopped.After(last) || stopped.Equal(last) && cmp.Less(peer, t.From) {
			t.From, t.Reason, last = peer, reason, stopped
		}
	}
	delete(c.past, a)
	if t.From != "" {
		t.Gap = max(now.Sub(last), 0)
	}
	return t
}
