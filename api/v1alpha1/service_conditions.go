// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

// ServiceConditionLoadBalancerAnnounced is the condition svcnet's manager
// writes on a LoadBalancer Service from the nodes'
// LoadBalancerNodeAnnouncements: True while a node announces its addresses
// (the message names the node of each address), False when no node may.
const ServiceConditionLoadBalancerAnnounced = "svcnet.io/LoadBalancerAnnounced"

// The reasons of the ServiceConditionLoadBalancerAnnounced condition.
const (
	// ServiceReasonL2: nodes answer for the addresses by L2 (condition
	// True).
	ServiceReasonL2 = "L2"
	// ServiceReasonNoCandidate: a node stopped answering for an address
	// and no node may take it over (condition False).
	ServiceReasonNoCandidate = "NoCandidate"
	// ServiceReasonPeersUnheard: no node answers for an address, and
	// nodes hold it back because they hear no L2 peer while others are
	// Ready (condition False); the heartbeats are likely filtered.
	ServiceReasonPeersUnheard = "PeersUnheard"
)
