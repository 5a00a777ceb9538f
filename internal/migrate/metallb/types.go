// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The specs of MetalLB's kinds as MetalLB v0.16 serves them (metallb.io
// v1beta1, and v1beta2 for BGPPeer), written from their JSON field names so
// that svcnet does not link MetalLB's module. Every field MetalLB has is
// here, converted or not, so that a field this package does not know is
// told apart from one it knows has no counterpart.

type ipAddressPoolSpec struct {
	Addresses         []string           `json:"addresses,omitempty"`
	AutoAssign        *bool              `json:"autoAssign,omitempty"`
	AvoidBuggyIPs     bool               `json:"avoidBuggyIPs,omitempty"`
	ServiceAllocation *serviceAllocation `json:"serviceAllocation,omitempty"`
}

type serviceAllocation struct {
	Priority           int                    `json:"priority,omitempty"`
	Namespaces         []string               `json:"namespaces,omitempty"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	ServiceSelectors   []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

// advertisementSpec is what L2Advertisement and BGPAdvertisement share.
type advertisementSpec struct {
	IPAddressPools         []string               `json:"ipAddressPools,omitempty"`
	IPAddressPoolSelectors []metav1.LabelSelector `json:"ipAddressPoolSelectors,omitempty"`
	NodeSelectors          []metav1.LabelSelector `json:"nodeSelectors,omitempty"`
	ServiceSelectors       []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
}

type l2AdvertisementSpec struct {
	advertisementSpec `json:",inline"`
	Interfaces        []string `json:"interfaces,omitempty"`
}

type bgpAdvertisementSpec struct {
	advertisementSpec   `json:",inline"`
	AggregationLength   *int32   `json:"aggregationLength,omitempty"`
	AggregationLengthV6 *int32   `json:"aggregationLengthV6,omitempty"`
	LocalPref           uint32   `json:"localPref,omitempty"`
	Communities         []string `json:"communities,omitempty"`
	Peers               []string `json:"peers,omitempty"`
}

// bgpPeerSpec is v1beta2's BGPPeer spec; v1beta1's fields are a subset
// with the same JSON (its nodeSelectors have matchLabels and
// matchExpressions of key, operator and values, like a LabelSelector).
type bgpPeerSpec struct {
	MyASN                  uint32                  `json:"myASN,omitempty"`
	ASN                    uint32                  `json:"peerASN,omitempty"`
	LocalASN               uint32                  `json:"localASN,omitempty"`
	DynamicASN             string                  `json:"dynamicASN,omitempty"`
	Address                string                  `json:"peerAddress,omitempty"`
	Interface              string                  `json:"interface,omitempty"`
	SourceAddress          string                  `json:"sourceAddress,omitempty"`
	Port                   uint16                  `json:"peerPort,omitempty"`
	HoldTime               *metav1.Duration        `json:"holdTime,omitempty"`
	KeepaliveTime          *metav1.Duration        `json:"keepaliveTime,omitempty"`
	ConnectTime            *metav1.Duration        `json:"connectTime,omitempty"`
	RouterID               string                  `json:"routerID,omitempty"`
	NodeSelectors          []metav1.LabelSelector  `json:"nodeSelectors,omitempty"`
	Password               string                  `json:"password,omitempty"`
	PasswordSecret         *corev1.SecretReference `json:"passwordSecret,omitempty"`
	BFDProfile             string                  `json:"bfdProfile,omitempty"`
	EnableGracefulRestart  bool                    `json:"enableGracefulRestart,omitempty"`
	EBGPMultiHop           bool                    `json:"ebgpMultiHop,omitempty"`
	VRF                    string                  `json:"vrf,omitempty"`
	DisableMP              bool                    `json:"disableMP,omitempty"`
	DualStackAddressFamily bool                    `json:"dualStackAddressFamily,omitempty"`
}

// communitySpec is a Community's: names for community values, which
// BGPAdvertisements' communities may use.
type communitySpec struct {
	Communities []communityAlias `json:"communities,omitempty"`
}

type communityAlias struct {
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
}

// bfdProfileSpec is a BFDProfile's: intervals in milliseconds.
type bfdProfileSpec struct {
	ReceiveInterval  *uint32 `json:"receiveInterval,omitempty"`
	TransmitInterval *uint32 `json:"transmitInterval,omitempty"`
	DetectMultiplier *uint32 `json:"detectMultiplier,omitempty"`
	EchoInterval     *uint32 `json:"echoInterval,omitempty"`
	EchoMode         *bool   `json:"echoMode,omitempty"`
	PassiveMode      *bool   `json:"passiveMode,omitempty"`
	MinimumTTL       *uint32 `json:"minimumTtl,omitempty"`
}
