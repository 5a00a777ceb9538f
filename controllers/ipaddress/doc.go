// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package ipaddress is the `ipaddress` controller: an event-driven audit of
// Services against the IPAddress objects that back their ClusterIPs, with
// kube-apiserver's repair-loop rules and Event reasons:
//
//   - a ClusterIP with no IPAddress: ClusterIPNotAllocated, the IPAddress is
//     created;
//   - an IPAddress of the allocator that references something else, or
//     another Service that does not hold the IP: recreated for the Service;
//   - one IP on two Services: ClusterIPAlreadyAllocated, reported only;
//   - a ClusterIP outside every ServiceCIDR: ClusterIPOutOfRange, reported;
//   - an IPAddress whose Service is gone, older than 60 s: IPAddressNotAllocated,
//     deleted; one whose Service does not hold the IP: IPAddressWrongReference,
//     deleted.
//
// svcnet adds ClusterIPInExclusiveServiceCIDR (an address of a ServiceCIDR
// bound exclusively to other namespaces, given while svcnet was down) and
// ServiceCIDRExhausted. It reacts within seconds rather than every three
// minutes, confirms with a live read before it writes so that it is harmless
// beside kube-apiserver's own loop, and emits each Event once per object and
// reason within a quiet period so that a broken cluster does not flood.
//
// It also exports per-ServiceCIDR usage (svcnet_clusterip_cidr_*), correct
// when ServiceCIDRs overlap or nest.
package ipaddress
