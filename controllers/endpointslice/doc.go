// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package endpointslice is svcnet's EndpointSlice controller. For every
// Service with a selector it keeps a set of EndpointSlices, one set per IP
// family, that lists the addresses of the Pods the selector matches, with
// the labels, ownerReference, conditions and hints that kube-proxy and
// other consumers of kube-controller-manager's controller rely on. It
// replaces that controller outright: its slices carry the same managed-by,
// endpointslice-controller.k8s.io, and the ones kube-controller-manager
// wrote are adopted in place. Slices someone else deletes or edits are put
// back by the next sync (controllers/internal/slicetracker tells this
// controller's writes from everyone else's).
//
// The package is split the way the upstream controller is: endpoints.go
// turns Pods into endpoints (a pure function of the Service, the Pods and
// the Node zones); desired.go packs them into slices and returns the
// creates, updates and deletes that get there from the existing slices (a
// pure function too, table-tested without a cluster); reconciler.go reads
// the world from the manager's cache and applies that plan. Packing differs
// from upstream in two ways that matter at scale: new endpoints go first
// into slices that are being written anyway, and after a scale-down slices
// are merged so the slice count returns to within one of
// ceil(endpoints/maxEndpointsPerSlice).
package endpointslice
