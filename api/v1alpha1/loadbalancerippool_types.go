// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPRange is an inclusive range of addresses of one family.
// +kubebuilder:validation:XValidation:rule="ip(self.start).family() == ip(self.end).family()",message="start and end must be of the same address family"
type IPRange struct {
	// start is the first address of the range.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="start must be an IP address"
	Start string `json:"start"`
	// end is the last address of the range; not before start.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="end must be an IP address"
	End string `json:"end"`
}

// LoadBalancerIPPoolSpec lists the addresses a pool gives and to whom.
// +kubebuilder:validation:XValidation:rule="(has(self.cidrs) && size(self.cidrs) > 0) || (has(self.ranges) && size(self.ranges) > 0)",message="a pool needs cidrs or ranges"
type LoadBalancerIPPoolSpec struct {
	// cidrs are blocks of addresses, IPv4 or IPv6 (an IPv6 block must be
	// /64 or longer). Every address of a block is given, network and
	// broadcast addresses included, unless avoidBuggyIPs is set.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="each cidr must be a CIDR such as 192.168.10.0/24"
	CIDRs []string `json:"cidrs,omitempty"`

	// ranges are inclusive start-end ranges of addresses.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Ranges []IPRange `json:"ranges,omitempty"`

	// namespaceSelector limits the pool to Services in namespaces with
	// matching labels. Unset: every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// serviceSelector limits the pool to Services with matching labels.
	// Unset: every Service.
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`

	// avoidBuggyIPs skips IPv4 addresses ending in .0 and .255, which
	// some clients and routers mishandle.
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// priority orders the pools that match a Service: the highest is
	// tried first, then the next. Equal priorities go by name.
	// +optional
	Priority int32 `json:"priority,omitempty"`

	// disabled stops the pool from giving new addresses; Services that
	// hold one of its addresses keep it.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// assignment says which Services get the pool's addresses: Automatic
	// (the default) gives them to any Service the selectors take;
	// OnRequest only to Services that request one of its addresses or
	// name the pool (annotation svcnet.io/load-balancer-ip-pool). MetalLB's
	// autoAssign: false is OnRequest.
	// +optional
	// +kubebuilder:default=Automatic
	Assignment PoolAssignment `json:"assignment,omitempty"`
}

// PoolAssignment says which Services a pool gives addresses to.
// +kubebuilder:validation:Enum=Automatic;OnRequest
type PoolAssignment string

const (
	// PoolAssignmentAutomatic gives addresses to every Service the pool's
	// selectors take. An empty assignment means the same.
	PoolAssignmentAutomatic PoolAssignment = "Automatic"
	// PoolAssignmentOnRequest gives addresses only to Services that
	// request one of them or name the pool.
	PoolAssignmentOnRequest PoolAssignment = "OnRequest"
)

// Condition reasons of a LoadBalancerIPPool (its Ready condition).
const (
	ReasonPoolReady    = "Ready"
	ReasonPoolDisabled = "Disabled"
	ReasonPoolOverlap  = "Overlap"
	ReasonPoolInvalid  = "InvalidSpec"
)

// LoadBalancerIPPoolStatus is what svcnet observed of a pool.
type LoadBalancerIPPoolStatus struct {
	// capacity is how many addresses the pool can give (a decimal string:
	// IPv6 pools can be larger than any integer field).
	// +optional
	Capacity string `json:"capacity,omitempty"`

	// allocated is how many of its addresses are taken: by Services, through
	// svcnet's IPAddresses, or by IPAddresses of other managers.
	// +optional
	Allocated int64 `json:"allocated"`

	// conditions: Ready (reasons Ready, Disabled, Overlap, InvalidSpec).
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

// LoadBalancerIPPool is a set of addresses svcnet gives to LoadBalancer
// Services, committed as networking.k8s.io/v1 IPAddress objects.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=lbpool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Disabled",type=boolean,JSONPath=`.spec.disabled`
// +kubebuilder:printcolumn:name="Assignment",type=string,JSONPath=`.spec.assignment`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Capacity",type=string,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocated`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LoadBalancerIPPool struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec lists the addresses and who may have them.
	Spec LoadBalancerIPPoolSpec `json:"spec"`

	// status is set by svcnet.
	// +optional
	Status LoadBalancerIPPoolStatus `json:"status,omitempty"`
}

// LoadBalancerIPPoolList is a list of LoadBalancerIPPools.
// +kubebuilder:object:root=true
type LoadBalancerIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the pools.
	Items []LoadBalancerIPPool `json:"items"`
}
