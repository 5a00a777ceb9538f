// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnouncementMode is how the agents make the network send a
// LoadBalancer address to the nodes.
// +kubebuilder:validation:Enum=L2;BGP
type AnnouncementMode string

// The announcement modes.
const (
	// AnnouncementModeL2: one node answers ARP (IPv4) and Neighbor
	// Solicitations (IPv6) for each address on the segment.
	AnnouncementModeL2 AnnouncementMode = "L2"
	// AnnouncementModeBGP: every node that should attract an address's
	// traffic advertises it to BGP peers as a /32 or /128.
	AnnouncementModeBGP AnnouncementMode = "BGP"
)

// L2NodeElection is how the nodes of an L2 announcement choose the one
// that answers for an address.
// +kubebuilder:validation:Enum=Rendezvous;MetalLB
type L2NodeElection string

// The L2 node elections.
const (
	// L2NodeElectionRendezvous: svcnet's rendezvous hash of node and
	// address, the highest first.
	L2NodeElectionRendezvous L2NodeElection = "Rendezvous"
	// L2NodeElectionMetalLB: MetalLB's, the lowest SHA-256 of
	// "node#address" first, so that every address stays on the node
	// MetalLB's speakers chose and a cluster moving from MetalLB keeps its
	// established connections.
	L2NodeElectionMetalLB L2NodeElection = "MetalLB"
)

// LoadBalancerAnnouncementSpec says which LoadBalancer addresses are
// announced, how, and from which nodes.
// +kubebuilder:validation:XValidation:rule="self.mode == 'BGP' ? has(self.bgp) : !has(self.bgp)",message="bgp is required in mode BGP and not allowed in mode L2"
// +kubebuilder:validation:XValidation:rule="self.mode == 'L2' || !has(self.interfaces)",message="interfaces apply to mode L2 only"
// +kubebuilder:validation:XValidation:rule="self.mode == 'L2' || !has(self.nodeElection)",message="nodeElection applies to mode L2 only"
type LoadBalancerAnnouncementSpec struct {
	// mode is L2 (one node answers ARP and NDP for each address) or BGP
	// (the nodes advertise the addresses to routers).
	Mode AnnouncementMode `json:"mode"`

	// poolSelector selects the LoadBalancerIPPools whose addresses are
	// announced. Unset: every pool.
	// +optional
	PoolSelector *metav1.LabelSelector `json:"poolSelector,omitempty"`

	// serviceSelector limits the announcement to Services with matching
	// labels. Unset: every Service with an address of the pools.
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`

	// nodeSelector selects the nodes that may announce. Unset: every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// interfaces are the node interfaces on which an L2 announcement
	// answers. A node that has none of them does not announce (its
	// agent reports it); nothing on the node is changed. Unset: the
	// interface that holds the node's InternalIP.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=15
	Interfaces []string `json:"interfaces,omitempty"`

	// nodeElection is how the nodes of an L2 announcement choose the one
	// that answers for an address: Rendezvous (svcnet's hash) or MetalLB
	// (MetalLB's, which `svcnet migrate metallb` sets so that every address
	// stays where MetalLB's speakers answered for it). Every node computes
	// the same choice from the names alone. Unset: Rendezvous.
	// +optional
	NodeElection L2NodeElection `json:"nodeElection,omitempty"`

	// bgp holds the BGP settings; required in mode BGP.
	// +optional
	BGP *BGPAnnouncement `json:"bgp,omitempty"`
}

// BGPAnnouncement is the BGP side of an announcement: this cluster's AS,
// the peers each selected node opens a session with, and the path
// attributes of the routes to the addresses it covers.
// +kubebuilder:validation:XValidation:rule="self.peers.all(p, !has(p.ebgpMultiHop) || p.asn != self.localASN)",message="ebgpMultiHop applies to eBGP peers only (asn other than localASN)"
type BGPAnnouncement struct {
	// localASN is the AS number the nodes speak as.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	LocalASN int64 `json:"localASN"`

	// peers are the routers every selected node peers with.
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Peers []BGPPeer `json:"peers"`

	// communities are the BGP communities (RFC 1997) of the routes to the
	// addresses this announcement covers: "ASN:value" with both parts
	// 0-65535, or one of the well-known names no-export, no-advertise,
	// no-export-subconfed, no-peer, blackhole, graceful-shutdown,
	// accept-own, llgr-stale, no-llgr.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=20
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') || self in ['no-export', 'no-advertise', 'no-export-subconfed', 'no-peer', 'blackhole', 'graceful-shutdown', 'accept-own', 'llgr-stale', 'no-llgr']",message="a community is ASN:value or a well-known name such as no-export"
	Communities []string `json:"communities,omitempty"`

	// largeCommunities are the BGP large communities (RFC 8092) of the
	// routes to the addresses this announcement covers:
	// "global:local1:local2", each part 0-4294967295.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=32
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$')",message="a large community is global:local1:local2"
	LargeCommunities []string `json:"largeCommunities,omitempty"`

	// localPreference is the LOCAL_PREF of the routes to the addresses
	// this announcement covers. BGP sends it to iBGP peers only (asn
	// equal to localASN); eBGP peers never see it. Unset: none is sent
	// and the router applies its default (100).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPreference *int64 `json:"localPreference,omitempty"`

	// aggregationLength is the prefix length of the routes to the IPv4
	// addresses this announcement covers: each is advertised as the prefix
	// of this length that holds it, so that the routers learn one route
	// for many addresses (MetalLB's aggregationLength). The prefix must
	// lie within the pool: the announcement is refused (Invalid) if a
	// pool it covers has a CIDR shorter than this, or a range that does
	// not begin and end on such prefixes. Unset: 32, a route per address.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// aggregationLengthV6 is aggregationLength for IPv6 addresses.
	// Unset: 128.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`
}

// BGPPasswordSecretRef names the Secret holding a peer's TCP-MD5
// password, in the agents' namespace.
type BGPPasswordSecretRef struct {
	// name is the Secret's name, in the namespace the agents run in
	// (svcnet-system unless installed elsewhere).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key of the password in the Secret's data. Unset:
	// "password".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// AnnotationBGPRouterID is the Node annotation that sets the BGP router
// ID its agent speaks with (an IPv4 address, e.g. "10.255.0.7"), for
// nodes whose derived one does not suit the network.
const AnnotationBGPRouterID = "svcnet.io/bgp-router-id"

// BGPPeer is one router the nodes peer with.
// +kubebuilder:validation:XValidation:rule="!has(self.holdTime) || !has(self.keepaliveTime) || duration(self.keepaliveTime) <= duration(self.holdTime)",message="keepaliveTime must not exceed holdTime"
// +kubebuilder:validation:XValidation:rule="!has(self.sourceAddress) || !isIP(self.sourceAddress) || !isIP(self.address) || ip(self.sourceAddress).family() == ip(self.address).family()",message="sourceAddress must be of the address's IP family"
// +kubebuilder:validation:XValidation:rule="!has(self.bfd) || !has(self.ebgpMultiHop)",message="bfd is single-hop (RFC 5881) and cannot be used with ebgpMultiHop"
type BGPPeer struct {
	// address is the peer's IP address.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="address must be an IP address"
	Address string `json:"address"`

	// asn is the peer's AS number.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967295
	ASN int64 `json:"asn"`

	// port is the peer's BGP port. Unset: 179.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// holdTime is how long a session may stay silent before it is
	// declared down and the node's routes withdrawn: the failover time
	// when a node dies, unless bfd is set. At least 3s. Unset: 90s.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s')",message="holdTime must be at least 3s"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// keepaliveTime is the interval of keepalive messages. Unset: a third
	// of holdTime.
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// gracefulRestartTime is how long the peer keeps a node's routes while
	// its agent restarts (RFC 4724). Unset: 120s; 0s turns graceful
	// restart off.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('4095s')",message="gracefulRestartTime must be between 0s and 4095s"
	GracefulRestartTime *metav1.Duration `json:"gracefulRestartTime,omitempty"`

	// passive makes the nodes wait for the peer to connect instead of
	// connecting themselves.
	// +optional
	Passive bool `json:"passive,omitempty"`

	// passwordSecretRef names the Secret, in the agents' namespace, whose
	// key holds the session's TCP-MD5 password (RFC 2385); the router
	// must have the same. While the Secret or its key is missing, the
	// nodes leave this peer out (and say so in an Event on the
	// announcement) and keep their other peers. Unset: no password.
	// +optional
	PasswordSecretRef *BGPPasswordSecretRef `json:"passwordSecretRef,omitempty"`

	// ebgpMultiHop is the TTL of the session's packets, for an eBGP peer
	// more than one hop away (2-255). Unset: 1, the peer on a connected
	// network.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	EBGPMultiHop int32 `json:"ebgpMultiHop,omitempty"`

	// sourceAddress is the local address the nodes open the session from
	// and listen on for it, of the address's family. A node that does
	// not have it cannot connect. Unset: the kernel chooses by route.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="sourceAddress must be an IP address"
	SourceAddress string `json:"sourceAddress,omitempty"`

	// nodeSelector limits the nodes that peer with this router to those
	// with matching labels, among those the announcement selects, as
	// MetalLB's BGPPeer nodeSelectors do (e.g. one router per rack).
	// Unset: every node of the announcement.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// bfd runs Bidirectional Forwarding Detection (RFC 5880, single hop
	// as RFC 5881) beside the session, so that a dead link, node or
	// router is found in receiveInterval/transmitInterval times
	// detectMultiplier (900ms by default) rather than the hold time: the
	// router must run BFD with the nodes too (FRR: neighbor X bfd) to
	// drop a dead node's routes that fast, and each node resets its BGP
	// session when BFD declares the peer down. Asynchronous mode only;
	// the peer must be on a connected network (no ebgpMultiHop). Unset:
	// no BFD.
	// +optional
	BFD *BGPPeerBFD `json:"bfd,omitempty"`
}

// BGPPeerBFD is the BFD a node runs with a BGP peer. The defaults and
// bounds are those of MetalLB's BFDProfile.
type BGPPeerBFD struct {
	// receiveInterval is the shortest interval between BFD packets the
	// nodes accept from the peer (10ms-60s). Unset: 300ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('60s')",message="receiveInterval must be between 10ms and 60s"
	ReceiveInterval *metav1.Duration `json:"receiveInterval,omitempty"`

	// transmitInterval is the interval the nodes would like to send BFD
	// packets at (10ms-60s); the peer's receive interval may make it
	// longer. While the session is not up, packets go once a second.
	// Unset: 300ms.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('60s')",message="transmitInterval must be between 10ms and 60s"
	TransmitInterval *metav1.Duration `json:"transmitInterval,omitempty"`

	// detectMultiplier is how many intervals may pass without a packet
	// from a node before the peer declares the session down (2-255).
	// Unset: 3.
	// +optional
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	DetectMultiplier int32 `json:"detectMultiplier,omitempty"`
}

// The Accepted condition of a LoadBalancerAnnouncement and its reasons.
const (
	AnnouncementConditionAccepted = "Accepted"

	ReasonAnnouncementAccepted = "Accepted"
	ReasonAnnouncementInvalid  = "InvalidSpec"
	ReasonAnnouncementOverlap  = "Overlap"
)

// LoadBalancerAnnouncementStatus is what svcnet observed of an
// announcement.
type LoadBalancerAnnouncementStatus struct {
	// conditions: Accepted (reasons Accepted, InvalidSpec, Overlap). The
	// agents act on an announcement only while it is Accepted for its
	// current generation.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// LoadBalancerAnnouncement tells the agents how to announce LoadBalancer
// addresses: by L2 (ARP/NDP) from one node per address, or by BGP from
// every node that should attract the traffic.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=lbann
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LoadBalancerAnnouncement struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what is announced, how and from where.
	Spec LoadBalancerAnnouncementSpec `json:"spec"`

	// status is set by svcnet.
	// +optional
	Status LoadBalancerAnnouncementStatus `json:"status,omitempty"`
}

// LoadBalancerAnnouncementList is a list of LoadBalancerAnnouncements.
// +kubebuilder:object:root=true
type LoadBalancerAnnouncementList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the announcements.
	Items []LoadBalancerAnnouncement `json:"items"`
}

// Accepted tells whether the announcement's status accepts its current
// generation: the agents act on it only then.
func (a *LoadBalancerAnnouncement) Accepted() bool {
	for _, c := range a.Status.Conditions {
		if c.Type == AnnouncementConditionAccepted {
			return c.Status == metav1.ConditionTrue && c.ObservedGeneration == a.Generation
		}
	}
	return false
}
