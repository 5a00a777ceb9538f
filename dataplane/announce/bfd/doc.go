// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package bfd is Bidirectional Forwarding Detection (RFC 5880) in
// asynchronous mode over single-hop UDP (RFC 5881), as the BGP speaker
// uses it to find a dead link or router in well under a second, and as
// routers find a dead node: FRR's bfdd, a switch's BFD.
//
// Session is the protocol's state machine alone (§6.8: states,
// discriminators, reception rules, timers, poll sequences), fed packets
// and a clock by its caller and tested without a network. Runner gives a
// Session its sockets: UDP port 3784 with a TTL (hop limit) of 255 sent
// and required on what is received (RFC 5881 §5, GTSM), from a source
// port in 49152-65535, inside the node's network namespace. Echo mode,
// demand mode and authentication are not implemented: a packet asking
// for authentication is discarded, as §6.8.6 says for a session without.
package bfd
