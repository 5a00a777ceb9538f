// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nftables is the node agent's nftables dataplane (`svcnet agent
// --mode=nftables`): one table per IP family ("ip svcnet", "ip6 svcnet")
// that nothing else writes to.
//
// The layout is built around what the kernel's cost is, not only around
// kube-proxy's shape. A transaction that adds a rule, or a jump or goto
// element of a verdict map, makes the kernel validate every chain reachable
// from the table's base chains; with a chain per Service (and, before
// Kubernetes 1.37, per endpoint), as kube-proxy's nftables mode has, that
// walk grows with the cluster. Here
// the chains are a small fixed set, and every Service lives in data: sets
// that classify destinations, and maps named endpoints-<protocol>-<N> that
// hold the endpoints of every service port of that protocol with N
// endpoints, keyed by destination and bucket (0..N-1). The chain
// "endpoints" has one rule per protocol and N in use, `meta l4proto tcp
// dnat to <destination> . numgen random mod N map @endpoints-tcp-<N>`: a
// destination whose endpoints are not in that map misses the lookup and
// falls through to the next rule. An endpoint change is therefore a
// handful of element deletions and additions that no rule or verdict
// depends on. Only ports with ClientIP affinity get chains of their own
// (kube-proxy's shape: a set per endpoint remembering its clients), reached
// through a verdict map; their changes walk those chains only.
//
// Render computes a Service's Fragment (its elements and its own objects);
// Backend keeps the fragments and applies the difference from what it last
// applied. Objects, rules and verdict map elements go through knftables'
// API (one `nft -f` transaction, knftables' typed errors); the elements of
// the data sets and maps go over netlink through google/nftables
// (netlink.go) when the interface is NewInterface's: an endpoint change is
// then one netlink transaction with no nft process, and a full sync's
// hundreds of thousands of elements are never held or parsed as text.
// With knftables' Fake every element goes in the knftables transaction,
// which is what the golden tests read.
package nftables
