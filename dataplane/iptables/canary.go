// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"fmt"

	"github.com/svcnet-io/svcnet/dataplane"
)

// ChainCanary is kube-proxy's canary chain. The agent creates it, with
// one rule, in the mangle, nat and filter tables on every full sync, in
// the same transaction as the rules of each table; when it or its rule is
// gone (a firewalld reload, `iptables -F`, a table flushed or deleted),
// so are the rules, and the agent makes a full sync at once instead of
// waiting for the hourly one.
const ChainCanary = "KUBE-PROXY-CANARY"

// canaryRule is the canary's one rule: a chain that is flushed but not
// deleted (`iptables -F` keeps chains) is caught by its missing rule.
var canaryRule = comment("svcnet canary: the rules of this table are in place") + " -j RETURN"

// canaryTables are the tables the canary lives in, mangle first: it is
// the cheapest to read, and kube-proxy checks it first.
var canaryTables = []string{"mangle", "nat", "filter"}

// canaryChain is the canary as a chain of a table in a full sync's
// restore.
func canaryChain() *Chain {
	return &Chain{Name: ChainCanary, Rules: []string{canaryRule}}
}

// withCanary adds the canary to the chains a full sync writes to the
// filter and nat tables.
func withCanary(write [2][]*Chain) [2][]*Chain {
	var out [2][]*Chain
	for t := range write {
		out[t] = append(append(make([]*Chain, 0, len(write[t])+1), write[t]...), canaryChain())
	}
	return out
}

// mangleCanaryText is the restore input that puts the canary in the
// mangle table, which holds nothing else of this dataplane.
func mangleCanaryText() []byte {
	return []byte("*mangle\n:" + ChainCanary + " - [0:0]\n-A " + ChainCanary + " " + canaryRule + "\nCOMMIT\n")
}

// CanaryIntact tells whether the canary and its rule are in place in
// every table; the first table without them is named in missing.
func CanaryIntact(ctx context.Context, ipt Interface) (intact bool, missing string, err error) {
	for _, table := range canaryTables {
		rules, exists, err := ipt.ChainRules(ctx, table, ChainCanary)
		if err != nil {
			return false, "", fmt.Errorf("reading the canary in the %s table: %w", table, err)
		}
		if !exists || len(rules) == 0 {
			return false, table, nil
		}
	}
	return true, "", nil
}

// CheckIntact implements dataplane.Flushable: it fails with
// dataplane.ErrFlushed once a table lost the canary that this backend's
// full syncs put there.
func (b *Backend) CheckIntact(ctx context.Context) error {
	intact, missing, err := CanaryIntact(ctx, b.ipt)
	switch {
	case err != nil:
		return err
	case !intact:
		return fmt.Errorf("%w: the %s table has no %s rule", dataplane.ErrFlushed, missing, ChainCanary)
	}
	return nil
}
