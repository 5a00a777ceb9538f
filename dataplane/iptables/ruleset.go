package iptables

import (
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
}

func (c *Chain) add(parts ...string) {
	c.Rules = append(c.Rules, strings.Join(parts, " "))
}

// content is the text that identifies the chain's rules, to tell whether
// a chain changed since it was last written.
func (c *Chain) content() string { return strings.Join(c.Rules, "\n") }

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
// Chains named in deleteChains are flushed and deleted.
func (r *Ruleset) RestoreText(deleteFilter, deleteNAT []string) []byte {
	return r.restoreText(nil, nil, deleteFilter, deleteNAT)
}

// restoreText renders the chains for which include returns true (all when
// include is nil), then deletes the given chains.
// extra holds further lines per table (jump rules from built-in chains),
// written after the chains' rules.
func (r *Ruleset) restoreText(include func(table string, c *Chain) bool, extra map[string][]string, deleteFilter, deleteNAT []string) []byte {
	var b strings.Builder
	write := func(name string, chains []*Chain, del []string) {
		b.WriteString("*" + name + "\n")
		var written []*Chain
		for _, c := range chains {
			if include == nil || include(name, c) {
				written = append(written, c)
				b.WriteString(":" + c.Name + " - [0:0]\n")
			}
		}
		for _, n := range del {
			b.WriteString(":" + n + " - [0:0]\n")
		}
		for _, c := range written {
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
	write("filter", r.Filter, deleteFilter)
	write("nat", r.NAT, deleteNAT)
	return []byte(b.String())
}
