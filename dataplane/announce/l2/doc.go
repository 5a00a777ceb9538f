// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package l2 announces LoadBalancer addresses on a segment: one node
// answers ARP requests and Neighbor Solicitations for each address, and
// says so at once by gratuitous ARP and unsolicited Neighbor
// Advertisements when it takes one over.
//
// Which node answers is decided among the agents on the segment, without
// the API server: each broadcasts a heartbeat frame (EtherType 0x88B5)
// every interval on each interface it announces on, naming the
// announcements it serves there and the addresses it answers for (its
// claims). decide (pure, in owner.go) turns the wanted addresses, the live
// peers and their claims into the addresses this node answers for: the
// first live candidate by announcementpolicy.Rank answers, it takes an address over
// only once no live peer claims it, and of two claimants the lower-ranked
// lets go. A Segment (segment.go) runs that on one interface with packet
// sockets: heartbeats, the ARP and NDP responder, announcements on
// takeover. From the claims it heard (failover.go, no I/O, like decide) it
// tells, for each address it takes, which node answered for it before, why
// that node stopped and how long the address may have gone unanswered.
// Nothing on the node's interfaces or addresses is changed.
//
// Where raw frames are filtered (port security, some virtual switches),
// the same heartbeats also go as UDP datagrams to the candidate peers'
// InternalIPs on the segment's prefixes (udp.go, Config.LivenessPort),
// from a socket bound to the interface; a peer heard on either path is
// alive, and the copy heard second is dropped by its sequence number.
// hashicorp/memberlist was weighed and not taken: its round-robin probes
// and Lifeguard suspicion (ProbeInterval 1 s, SuspicionMult 4, up to 6x
// until confirmed) detect a death in seconds even tuned down, against
// the 500 ms dead interval here, and its membership is cluster-wide
// while claims are per segment and must be current at each heartbeat;
// carrying them would have been this heartbeat over its transport.
//
// A node that hears no peer at all while other candidates are Ready in
// the API (Want.Ready) holds back (holdsBack in owner.go): it answers
// only if it is the first Ready candidate by rank, so filtered heartbeats
// leave one answer per address instead of every node answering, and the
// segment reports what it holds back (Config.OnHold, Segment.HeldBack).
package l2
