// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package servicecidr is the `servicecidr` controller, a replacement for
// kube-controller-manager's service-cidr-controller: it puts the
// networking.k8s.io/service-cidr-finalizer on every ServiceCIDR, reports
// Ready=True, and while a ServiceCIDR is being deleted keeps it (Ready=False,
// reason Terminating) as long as an allocated IPAddress lies in it and in no
// other ServiceCIDR. The finalizer goes only after a short grace period so
// that every allocator has seen the deletion and stopped using the range.
//
// BindingReconciler keeps the status of svcnet's ServiceCIDRBindings.
package servicecidr
