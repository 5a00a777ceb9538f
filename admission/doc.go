// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package admission is svcnet's mutating webhook on Services: it fills
// spec.clusterIPs (with allocator/ipam) and the missing nodePorts and
// healthCheckNodePort (with allocator/portrange) at admission, and
// kube-apiserver commits them (IPAddress objects, its nodePort bitmap).
//
// The allocators' view comes from informer caches plus the reservations the
// handler made itself, so two concurrent requests never get the same value.
// Only the elected leader answers; until it is the leader and its caches are
// in sync, a replica lets requests through unchanged and kube-apiserver
// allocates, exactly as when svcnet is down (failurePolicy: Ignore).
package admission
