// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"slices"
	"strings"
)

// Ruleset is what Render produces: the chains of the filter and nat tables
// this dataplane owns, each with its rules in order.
type Ruleset struct {
	Filter []*Chain
	NAT    []*Chain
}

// Chain is one chain and its rules (each the text after "-A <chain> ").
type Chain struct {
	Name  string
	Rules []string
	// text caches content() of a chain that no longer changes.
	text   string
	frozen bool
}

// freeze caches the chain's content; its rules must not change after.
func (c *Chain) freeze() {
	c.text = strings.Join(c.Rules, "\n")
	c.frozen = true
}

func (c *Chain) add(parts ...string) {
	c.Rules = append(c.Rules, strings.Join(parts, " "))
}

// content is the text that identifies the chain's rules, to tell whether
// a chain changed since it was last written.
func (c *Chain) content() string {
	if c.frozen {
		return c.text
	}
	return strings.Join(c.Rules, "\n")
}

// table is a set of chains being built, in first-use order.
type table struct {
	chains []*Chain
	byName map[string]*Chain
}

func newTable(fixed ...string) *table {
	t := &table{byName: map[string]*Chain{}}
	for _, n := range fixed {
		t.chain(n)
	}
	return t
}

func (t *table) chain(name string) *Chain {
	if c, ok := t.byName[name]; ok {
		return c
	}
	c := &Chain{Name: name}
	t.byName[name] = c
	t.chains = append(t.chains, c)
	return c
}

// RestoreText renders the whole ruleset as iptables-restore input for a
// --noflush restore: every chain is declared (which flushes it) and filled.
// Chains named in deleteFilter and deleteNAT are flushed and deleted.
func (r *Ruleset) RestoreText(deleteFilter, deleteNAT []string) []byte {
	return restoreText(r.Filter, r.NAT, nil, deleteFilter, deleteNAT)
}

// restoreText renders the given chains of each table, then the extra lines
// (jump rules from built-in chains), then deletes the given chains.
func restoreText(filter, nat []*Chain, extra map[string][]string, deleteFilter, deleteNAT []string) []byte {
	var b strings.Builder
	write := func(name string, chains []*Chain, del []string) {
		b.WriteString("*" + name + "\n")
		// Chains are declared in name order: iptables-nft (1.8.x) keeps
		// its chain cache sorted by name, and inserting in order makes a
		// cold restore of many chains much faster than in rendering order
		// (BENCHMARKS.md (h)). Rules stay in rendering order, so a dump
		// reads like kube-proxy's.
		names := make([]string, 0, len(chains)+len(del))
		for _, c := range chains {
			names = append(names, c.Name)
		}
		names = append(names, del...)
		slices.Sort(names)
		for _, n := range names {
			b.WriteString(":" + n + " - [0:0]\n")
		}
		for _, c := range chains {
			for _, rule := range c.Rules {
				b.WriteString("-A " + c.Name + " " + rule + "\n")
			}
		}
		for _, line := range extra[name] {
			b.WriteString(line + "\n")
		}
		for _, n := range del {
			b.WriteString("-X " + n + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	write("filter", filter, deleteFilter)
	write("nat", nat, deleteNAT)
	return []byte(b.String())
}
