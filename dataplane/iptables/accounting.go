// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"

	"github.com/go-logr/logr"
)

// kube-proxy's netfilter accounting (nfacct) counters, which two of its
// rules count packets into and its metrics read: the names are the same,
// so that whatever reads them on a node (kube-proxy's dashboards, the
// nfacct tool) finds them.
const (
	// CounterInvalidDropped counts the packets KUBE-FORWARD drops because
	// conntrack marked them INVALID.
	CounterInvalidDropped = "ct_state_invalid_dropped_pkts"
	// CounterLocalhostNodePorts counts the packets KUBE-NODEPORTS sends on
	// to a Service from a NodePort on 127.0.0.0/8 (IPv4 localhost
	// NodePorts).
	CounterLocalhostNodePorts = "localhost_nps_accepted_pkts"
)

// Counters says which of kube-proxy's nfacct counters exist on the node.
// A rule that counts into one carries the `-m nfacct` match only while it
// does: iptables-restore refuses a rule naming a counter that is not
// there, and kube-proxy then writes the rule without it.
type Counters struct {
	// InvalidDropped: CounterInvalidDropped exists.
	InvalidDropped bool
	// LocalhostNodePorts: CounterLocalhostNodePorts exists.
	LocalhostNodePorts bool
}

// nfacctMatch is the match that counts a rule's packets into counter.
func nfacctMatch(counter string) string { return "-m nfacct --nfacct-name " + counter }

// Accounting creates nfacct counters in the node's network namespace;
// *nfacct.Client (internal/platform/nfacct) is the real one.
type Accounting interface {
	// Ensure creates the counter unless it exists; an existing one keeps
	// its figures.
	Ensure(name string) error
}

// Option configures a Backend.
type Option func(*Backend)

// WithAccounting makes the backend count packets as kube-proxy does:
// before each full sync (the first, one after a failure, the periodic
// one) it ensures kube-proxy's counters through acct, and its rules
// count into those that exist. Without it, no rule counts.
func WithAccounting(acct Accounting) Option {
	return func(b *Backend) { b.acct = acct }
}

// ensureCounters creates kube-proxy's counters, as kube-proxy does on
// each full sync, and says which exist. Both are ensured in every family
// and whatever the localhost NodePort setting, as kube-proxy does: the
// metrics then read zero rather than nothing.
func (b *Backend) ensureCounters(ctx context.Context) Counters {
	ensure := func(name string) bool {
		if err := b.acct.Ensure(name); err != nil {
			logr.FromContextOrDiscard(ctx).Error(err, "Failed to create nfacct counter; the rules will not count into it and its metric will not be updated",
				"counter", name, "family", b.family)
			return false
		}
		return true
	}
	return Counters{
		InvalidDropped:     ensure(CounterInvalidDropped),
		LocalhostNodePorts: ensure(CounterLocalhostNodePorts),
	}
}
