// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package v1alpha1 holds svcnet's own API types, group networking.svcnet.io.
// +kubebuilder:object:generate=true
// +groupName=networking.svcnet.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "networking.svcnet.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ServiceCIDRBinding{}, &ServiceCIDRBindingList{},
		&LoadBalancerIPPool{}, &LoadBalancerIPPoolList{},
		&LoadBalancerAnnouncement{}, &LoadBalancerAnnouncementList{},
		&LoadBalancerNodeAnnouncement{}, &LoadBalancerNodeAnnouncementList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
