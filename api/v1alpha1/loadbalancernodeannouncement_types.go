// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// L2Protocol is how a node answers for an address on its segment.
// +kubebuilder:validation:Enum=ARP;NDP
type L2Protocol string

// The L2 protocols.
const (
	// L2ProtocolARP answers ARP requests for an IPv4 address.
	L2ProtocolARP L2Protocol = "ARP"
	// L2ProtocolNDP answers Neighbor Solicitations for an IPv6 address.
	L2ProtocolNDP L2Protocol = "NDP"
)

// TakeoverReason says why the node that answered for an address before
// stopped.
// +kubebuilder:validation:Enum=PeerLost;Released
type TakeoverReason string

// The takeover reasons.
const (
	// TakeoverReasonPeerLost: the previous node's heartbeats stopped (its
	// node, agent or link died), or its restarted agent no longer claimed
	// the address.
	TakeoverReasonPeerLost TakeoverReason = "PeerLost"
	// TakeoverReasonReleased: the previous node, still alive, let go of
	// the address (no endpoint left under Local, no longer selected,
	// shutting down).
	TakeoverReasonReleased TakeoverReason = "Released"
)

// ServiceReference names a Service.
type ServiceReference struct {
	// namespace is the Service's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`

	// name is the Service's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// L2Takeover is how an address came to a node from another one.
type L2Takeover struct {
	// fromNode is the node that answered for the address before.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	FromNode string `json:"fromNode"`

	// reason is why fromNode stopped: PeerLost or Released.
	Reason TakeoverReason `json:"reason"`

	// unansweredFor is, as far as fromNode's heartbeats tell, the longest
	// any client may have gone unanswered during the move.
	UnansweredFor metav1.Duration `json:"unansweredFor"`
}

// L2AnsweredAddress is a LoadBalancer address a node answers for.
type L2AnsweredAddress struct {
	// address is the LoadBalancer address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address"
	Address string `json:"address"`

	// interface is the node's interface on which it answers.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface"`

	// protocol is ARP (IPv4) or NDP (IPv6).
	Protocol L2Protocol `json:"protocol"`

	// services are the Services holding the address that the node
	// announces it for. The manager writes the condition only on those of
	// them whose status holds the address.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Services []ServiceReference `json:"services"`

	// since is when the node started answering, by its clock, to the
	// microsecond: of two nodes' reports on an address, the later wins.
	Since metav1.MicroTime `json:"since"`

	// takeover, when the address moved from another node, says from which
	// and why.
	// +optional
	Takeover *L2Takeover `json:"takeover,omitempty"`
}

// L2WithdrawnAddress is a LoadBalancer address a node stopped answering
// for when no node could take it over (none selected, or none with a
// ready endpoint under externalTrafficPolicy Local).
type L2WithdrawnAddress struct {
	// address is the LoadBalancer address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address"
	Address string `json:"address"`

	// services are the Services holding the address.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Services []ServiceReference `json:"services"`

	// since is when the node stopped answering, by its clock, to the
	// microsecond.
	Since metav1.MicroTime `json:"since"`
}

// L2HeldBackAddress is a LoadBalancer address a node does not answer for
// although no peer it hears answers for it: the node hears no peer at
// all on the segment (neither heartbeat frames nor the UDP path) while
// other candidates are Ready in the API, so it leaves the address to the
// first Ready candidate by rank rather than answer beside it.
type L2HeldBackAddress struct {
	// address is the LoadBalancer address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address"
	Address string `json:"address"`

	// interface is the node's interface on which it hears no peer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Interface string `json:"interface"`

	// services are the Services holding the address.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Services []ServiceReference `json:"services"`

	// since is when the node started holding it back, by its clock, to
	// the microsecond.
	Since metav1.MicroTime `json:"since"`
}

// LoadBalancerNodeAnnouncementSpec is what one node's agent reports of its
// L2 announcements.
type LoadBalancerNodeAnnouncementSpec struct {
	// addresses are the LoadBalancer addresses the node answers for.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=4096
	Addresses []L2AnsweredAddress `json:"addresses,omitempty"`

	// withdrawn are the addresses the node stopped answering for with no
	// other node to take them over, kept while a Service holds them.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=4096
	Withdrawn []L2WithdrawnAddress `json:"withdrawn,omitempty"`

	// heldBack are the addresses the node does not answer for because it
	// hears no peer on the segment while other candidates are Ready in
	// the API: the heartbeats are likely filtered between the nodes.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=4096
	HeldBack []L2HeldBackAddress `json:"heldBack,omitempty"`
}

// LoadBalancerNodeAnnouncement is one node's report of the LoadBalancer
// addresses it answers for by L2, named after the node and written only
// by that node's agent (a ValidatingAdmissionPolicy holds the agents to
// their own node's object). svcnet's manager composes the Services'
// svcnet.io/LoadBalancerAnnounced condition from every node's report, so
// that the agents need no right on Services. Like a CSINode or a Lease,
// its one writer reports into spec.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=lbnodeann
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LoadBalancerNodeAnnouncement struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata; its name is the node's.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the node reports.
	// +optional
	Spec LoadBalancerNodeAnnouncementSpec `json:"spec,omitempty"`
}

// LoadBalancerNodeAnnouncementList is a list of
// LoadBalancerNodeAnnouncements.
// +kubebuilder:object:root=true
type LoadBalancerNodeAnnouncementList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the nodes' reports.
	Items []LoadBalancerNodeAnnouncement `json:"items"`
}
