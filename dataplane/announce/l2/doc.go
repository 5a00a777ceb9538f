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
package l2
