// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package dataplane is the seam between the node agent and the kernel. The
// agent (dataplane/agent) turns Services and EndpointSlices into the
// model's service ports (dataplane/model) and hands them, Service by
// Service, to a Backend of one IP family; the backend renders them into its
// own rules and applies all of them in one transaction per sync. iptables
// (dataplane/iptables) and nftables (dataplane/nftables) are the backends,
// chosen by `svcnet agent --mode`; each owns its tables and chains and
// touches nothing else.
package dataplane

import (
	"context"
	"errors"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

// Backend programs the rules of one IP family on one node.
type Backend interface {
	// Mode is the backend's name as `svcnet agent --mode` spells it.
	Mode() string
	// Family is the IP family whose rules the backend programs.
	Family() corev1.IPFamily
	// SetService renders the ports of one Service and keeps them for the
	// next Sync, replacing what the Service had; no ports remove the
	// Service's rules.
	SetService(svc types.NamespacedName, ports []*model.ServicePort)
	// Sync applies the rules of every Service set so far in one atomic
	// transaction. After a failed Sync the previous rules stay in place and
	// the next Sync is full.
	Sync(ctx context.Context, node Node) (SyncResult, error)
	// ForceFull makes the next Sync rewrite everything and remove whatever
	// the backend owns but no longer renders (the periodic full resync).
	ForceFull()
	// Cleanup removes every rule, chain and table the backend owns from the
	// node, for a node leaving this mode.
	Cleanup(ctx context.Context) error
}

// Flushable is implemented by a backend whose rules other programs can
// remove behind its back (iptables: a firewalld reload or `iptables -F`
// flushes its tables). CheckIntact fails with ErrFlushed when that
// happened, and the agent then makes the backend's next sync full.
type Flushable interface {
	CheckIntact(ctx context.Context) error
}

// ErrFlushed marks a Flushable backend whose rules were removed by
// another program.
var ErrFlushed = errors.New("the rules were flushed by another program")

// ErrListRules marks a Sync that failed reading the rules live on the node
// (before a full sync), as opposed to one whose transaction was refused:
// backends wrap such errors with it.
var ErrListRules = errors.New("reading the live rules")

// Node is what a sync needs to know of the node beyond the Services.
type Node struct {
	// NodePortIPs are the local addresses that accept NodePort traffic;
	// empty means every local address (kube-proxy's default).
	NodePortIPs []netip.Addr
	// ServiceCIDRs are the ranges of the cluster's ServiceCIDR objects of
	// the backend's family: the nftables backend drops traffic to their
	// addresses that no Service has, as kube-proxy's nftables mode does.
	ServiceCIDRs []netip.Prefix
}

// SyncResult describes one applied sync, for logs and metrics.
type SyncResult struct {
	// Full is true when the sync rewrote everything (the first sync, the one
	// after a failure, or a forced one).
	Full bool
	// Rules counts the rules written.
	Rules int
	// Tables counts, per iptables table, the rules the backend owns and
	// those the sync wrote (kube-proxy's kubeproxy_sync_proxy_rules_iptables_*
	// metrics); nil for a backend without iptables tables.
	Tables []TableRules
}

// TableRules counts the rules of one iptables table.
type TableRules struct {
	Table          string
	Total, Written int
}
