// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// Mode is this backend's name for `svcnet agent --mode`.
const Mode = "iptables"

// Backend is the iptables implementation of dataplane.Backend for one IP
// family: it keeps each Service's rendered Fragment and assembles them, in
// Service order, into the Ruleset that its Syncer applies.
type Backend struct {
	family corev1.IPFamily
	cfg    Config
	syncer *Syncer
	ipt    Interface
	// acct creates the nfacct counters the rules count into; nil: none.
	acct Accounting

	mu    sync.Mutex
	frags map[string]*Fragment
	order []string // keys of frags, sorted
	// counted are the counters the last full sync found or created.
	counted Counters
}

var _ dataplane.Backend = (*Backend)(nil)

// NewBackend returns a backend that programs ipt. cfg's ClusterCIDRs and
// MasqueradeAll shape every Service's rules; its NodePortIPs and Counters
// are ignored (each Sync passes the node's current ones).
func NewBackend(family corev1.IPFamily, ipt Interface, cfg Config, opts ...Option) *Backend {
	cfg.NodePortIPs = nil
	cfg.Counters = Counters{}
	cfg.Family = family
	syncer := NewSyncer(ipt)
	syncer.localnetFirewall = family == corev1.IPv4Protocol && !cfg.NoLocalhostNodePorts
	b := &Backend{family: family, cfg: cfg, syncer: syncer, ipt: ipt, frags: map[string]*Fragment{}}
	for _, opt := range opts {
		opt(b)
	}
	return b
}

// Mode implements dataplane.Backend.
func (b *Backend) Mode() string { return Mode }

// Family implements dataplane.Backend.
func (b *Backend) Family() corev1.IPFamily { return b.family }

// SetService implements dataplane.Backend.
func (b *Backend) SetService(svc types.NamespacedName, ports []*model.ServicePort) {
	// KUBE-SERVICES lists the Services in the order of their
	// "namespace/name", and the chain names hash that string.
	key := svc.String()
	b.mu.Lock()
	defer b.mu.Unlock()
	i, found := slices.BinarySearch(b.order, key)
	if len(ports) == 0 {
		if found {
			delete(b.frags, key)
			b.order = slices.Delete(b.order, i, i+1)
		}
		return
	}
	if !found {
		b.order = slices.Insert(b.order, i, key)
	}
	b.frags[key] = RenderService(ports, b.cfg)
}

// Sync implements dataplane.Backend.
func (b *Backend) Sync(ctx context.Context, node dataplane.Node) (dataplane.SyncResult, error) {
	b.mu.Lock()
	frags := make([]*Fragment, 0, len(b.order))
	for _, k := range b.order {
		frags = append(frags, b.frags[k])
	}
	b.mu.Unlock()
	cfg := b.cfg
	cfg.NodePortIPs = node.NodePortIPs
	cfg.Counters = b.counters(ctx)
	res, err := b.syncer.Sync(ctx, Assemble(frags, cfg))
	out := dataplane.SyncResult{Full: res.Full, Rules: res.Rules}
	for t, name := range tableNames {
		out.Tables = append(out.Tables, dataplane.TableRules{Table: name, Total: res.Total[t], Written: res.Written[t]})
	}
	return out, err
}

// counters are those the rules of this sync count into: ensured before
// a full sync, as kube-proxy does (a counter deleted while the rules
// were flushed comes back with them), and those of the last full sync
// otherwise.
func (b *Backend) counters(ctx context.Context) Counters {
	if b.acct == nil {
		return Counters{}
	}
	if b.syncer.nextIsFull() {
		c := b.ensureCounters(ctx)
		b.mu.Lock()
		b.counted = c
		b.mu.Unlock()
		return c
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counted
}

// ForceFull implements dataplane.Backend.
func (b *Backend) ForceFull() { b.syncer.ForceFull() }

// Cleanup implements dataplane.Backend.
func (b *Backend) Cleanup(ctx context.Context) error {
	return Cleanup(ctx, b.ipt)
}
