// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceCIDRBindingSpec says which namespaces a ServiceCIDR serves.
type ServiceCIDRBindingSpec struct {
	// serviceCIDRName is the name of the networking.k8s.io/v1 ServiceCIDR
	// this binding gives to the selected namespaces. It cannot change.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceCIDRName is immutable; create another ServiceCIDRBinding"
	ServiceCIDRName string `json:"serviceCIDRName"`

	// namespaceSelector selects, by their labels, the namespaces whose
	// Services get their ClusterIPs from the ServiceCIDR. It must not be
	// empty: a binding to every namespace is the ServiceCIDR on its own.
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="namespaceSelector must select something: set matchLabels or matchExpressions"
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`

	// exclusive, when true, keeps every other namespace out of the
	// ServiceCIDR: svcnet never gives them an address from it, rejects one
	// they ask for explicitly, and reports one kube-apiserver gave them
	// while svcnet was down. Default false: the ServiceCIDR is preferred by
	// the selected namespaces and still open to the others.
	// +optional
	Exclusive bool `json:"exclusive,omitempty"`
}

// Condition types and reasons of a ServiceCIDRBinding.
const (
	// ConditionReady is True when the bound ServiceCIDR exists and is Ready.
	ConditionReady = "Ready"

	ReasonBound               = "Bound"
	ReasonServiceCIDRNotFound = "ServiceCIDRNotFound"
	ReasonServiceCIDRNotReady = "ServiceCIDRNotReady"
	ReasonInvalidSelector     = "InvalidSelector"
)

// ServiceCIDRBindingStatus is what svcnet observed of a binding.
type ServiceCIDRBindingStatus struct {
	// conditions: Ready (reasons Bound, ServiceCIDRNotFound,
	// ServiceCIDRNotReady, InvalidSelector).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// namespaces is how many namespaces the selector matches now.
	// +optional
	Namespaces int32 `json:"namespaces"`

	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ServiceCIDRBinding binds a ServiceCIDR to the namespaces matching a label
// selector: their Services get ClusterIPs from it, and with exclusive no
// other namespace does.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=scb
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="ServiceCIDR",type=string,JSONPath=`.spec.serviceCIDRName`
// +kubebuilder:printcolumn:name="Exclusive",type=boolean,JSONPath=`.spec.exclusive`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Namespaces",type=integer,JSONPath=`.status.namespaces`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceCIDRBinding struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the ServiceCIDR and the namespaces.
	Spec ServiceCIDRBindingSpec `json:"spec"`

	// status is set by svcnet.
	// +optional
	Status ServiceCIDRBindingStatus `json:"status,omitempty"`
}

// ServiceCIDRBindingList is a list of ServiceCIDRBindings.
// +kubebuilder:object:root=true
type ServiceCIDRBindingList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the list's metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the bindings.
	Items []ServiceCIDRBinding `json:"items"`
}
