// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package ipam chooses ClusterIPs. It holds no client and no informer: the
// admission handler feeds it the ServiceCIDRs and the IPAddress objects it
// sees, asks it for addresses, and kube-apiserver commits them.
//
// Choice, for one address family of one Service:
//
//  1. the address the same Service (namespace/name) released last, while it
//     is still held in quarantine (a re-created Service keeps its IP);
//  2. an address never used since the allocator started, from the eligible
//     ServiceCIDRs in preference order (oldest ServiceCIDR first, then by
//     name; a namespace's bound ServiceCIDRs only, when it has any), in each
//     the upper (dynamic) band of KEP-3070 first, then the lower band;
//  3. an address whose quarantine is over, the one released longest ago first;
//  4. when nothing else is left, the address released longest ago even though
//     its quarantine is not over: svcnet never makes a Service fail where
//     kube-apiserver alone would have given it an address.
//
// Every step costs the same whether the ranges are empty or nearly full: the
// free addresses of each prefix live in a freeset.Set.
package ipam
