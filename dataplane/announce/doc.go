// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package announce is the node agent's speaker: it makes the network send
// LoadBalancer addresses to the nodes. From the Services, their
// EndpointSlices, the pools, the Nodes and the accepted
// LoadBalancerAnnouncements it plans (plan.go, pure) what this node may
// announce: in L2 mode the addresses it is a candidate for on each
// interface, handed to an l2.Segment per interface, which agrees with the
// other nodes on the segment who answers; in BGP mode the addresses it
// should attract and its peers, handed to a bgp.Speaker. It reports what
// this node answers for by L2 in the node's LoadBalancerNodeAnnouncement
// (from which the manager writes the Services' svcnet.io/LoadBalancerAnnounced
// condition; the agent has no right on Services), records Events when this
// node takes or lets go of an address, and exports what it announces as
// metrics. The agent starts it with Setup; nothing here touches the
// agent's rules.
package announce
