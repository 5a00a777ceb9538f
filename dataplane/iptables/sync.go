// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/svcnet-io/svcnet/dataplane"
)

// jumpRule sends traffic from a built-in chain into this dataplane's
// chains, exactly as kube-proxy's jumps do.
type jumpRule struct {
	table, chain, comment, match, target string
}

func (j jumpRule) text() string {
	parts := []string{comment(j.comment)}
	if j.match != "" {
		parts = append(parts, j.match)
	}
	return strings.Join(append(parts, "-j "+j.target), " ")
}

var jumpRules = []jumpRule{
	{"filter", "INPUT", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW", ChainProxyFirewall},
	{"filter", "INPUT", "kubernetes health check service ports", "", ChainNodePorts},
	{"filter", "INPUT", "kubernetes externally-visible service portals", "-m conntrack --ctstate NEW", ChainExternalServices},
	{"filter", "FORWARD", "kubernetes forwarding rules", "", ChainForward},
	{"filter", "FORWARD", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW", ChainProxyFirewall},
	{"filter", "FORWARD", "kubernetes service portals", "-m conntrack --ctstate NEW", ChainServices},
	{"filter", "FORWARD", "kubernetes externally-visible service portals", "-m conntrack --ctstate NEW", ChainExternalServices},
	{"filter", "OUTPUT", "kubernetes load balancer firewall", "-m conntrack --ctstate NEW", ChainProxyFirewall},
	{"filter", "OUTPUT", "kubernetes service portals", "-m conntrack --ctstate NEW", ChainServices},
	{"nat", "PREROUTING", "kubernetes service portals", "", ChainServices},
	{"nat", "OUTPUT", "kubernetes service portals", "", ChainServices},
	{"nat", "POSTROUTING", "kubernetes postrouting rules", "", ChainPostrouting},
}

// Result describes one applied sync.
type Result struct {
	// Full is true when every chain was written (first sync, after a
	// failure, or when asked).
	Full bool
	// Chains and Rules count what was written; Deleted counts stale chains.
	Chains, Rules, Deleted int
	// Written and Total count the rules written and the rules of the
	// Ruleset, per table (filter, nat).
	Written, Total [2]int
}

// Syncer applies Rulesets. The first sync, and every sync after a failed
// one, is full: it reads the live tables to delete stale chains and to add
// missing jump rules, and rewrites every chain. Later syncs rewrite only
// the chains whose rules changed. Each sync is one iptables-restore
// --noflush, so a chain is replaced atomically and nothing this package
// does not name is touched: a failed sync leaves the previous rules in
// place.
type Syncer struct {
	ipt Interface

	mu       sync.Mutex
	written  [2]map[string]*writtenChain // filter, nat: chain -> what was written
	gen      uint64
	needFull bool
	// localnetFirewall: full syncs write KUBE-FIREWALL, which makes
	// route_localnet safe for localhost NodePorts (IPv4).
	localnetFirewall bool
}

// writtenChain is a chain's content as last written, and the sync that
// last saw it in a ruleset.
type writtenChain struct {
	content string
	seen    uint64
}

var tableNames = [2]string{"filter", "nat"}

// NewSyncer returns a Syncer whose first sync is full.
func NewSyncer(ipt Interface) *Syncer {
	return &Syncer{ipt: ipt, needFull: true}
}

// ForceFull makes the next sync full (the periodic resync).
func (s *Syncer) ForceFull() {
	s.mu.Lock()
	s.needFull = true
	s.mu.Unlock()
}

// nextIsFull tells whether the next Sync will be full.
func (s *Syncer) nextIsFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fullLocked()
}

// fullLocked tells whether a sync now is full; s.mu is held.
func (s *Syncer) fullLocked() bool { return s.needFull || s.written[0] == nil }

// Sync applies rs.
func (s *Syncer) Sync(ctx context.Context, rs *Ruleset) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	full := s.fullLocked()
	tables := [2][]*Chain{rs.Filter, rs.NAT}
	var ch changes
	if full {
		var err error
		if ch, err = s.fullChanges(ctx, tables); err != nil {
			return Result{Full: true}, err
		}
	} else {
		ch = s.partialChanges(tables)
	}
	res := ch.result(full)
	for t := range tables {
		for _, c := range tables[t] {
			res.Total[t] += len(c.Rules)
		}
	}
	if res.Chains == 0 && res.Deleted == 0 && len(ch.extra) == 0 {
		return res, nil
	}
	write := ch.write
	var data []byte
	if full {
		// The canary goes in with the rules, in the same transaction per
		// table: it disappears with them.
		write = withCanary(write)
		data = mangleCanaryText()
		if s.localnetFirewall {
			write[0] = append(write[0], localnetFirewallChain())
		}
	}
	data = append(data, restoreText(write[0], write[1], ch.extra, ch.del[0], ch.del[1])...)
	if err := s.ipt.Restore(ctx, data); err != nil {
		s.needFull = true
		return res, fmt.Errorf("applying %d chains: %w", res.Chains, err)
	}
	s.remember(tables, ch, full)
	s.needFull = false
	return res, nil
}

// changes is what one sync writes: the chains to (re)write and to delete
// per table (filter, nat), and lines for the built-in chains.
type changes struct {
	write [2][]*Chain
	del   [2][]string
	extra map[string][]string
}

func (ch *changes) result(full bool) Result {
	res := Result{Full: full}
	for t := range tableNames {
		res.Chains += len(ch.write[t])
		for _, c := range ch.write[t] {
			res.Written[t] += len(c.Rules)
		}
		res.Rules += res.Written[t]
		res.Deleted += len(ch.del[t])
		slices.Sort(ch.del[t])
	}
	return res
}

// fullChanges reads the live tables: every chain is written, the service
// chains no longer rendered are deleted, and missing jumps from the
// built-in chains are added.
func (s *Syncer) fullChanges(ctx context.Context, tables [2][]*Chain) (changes, error) {
	ch := changes{extra: map[string][]string{}}
	for t, name := range tableNames {
		live, err := s.ipt.Save(ctx, name)
		if err != nil {
			return ch, fmt.Errorf("%w: %s table: %w", dataplane.ErrListRules, name, err)
		}
		chains, rules := parseSave(live)
		wanted := make(map[string]bool, len(tables[t]))
		for _, c := range tables[t] {
			wanted[c.Name] = true
		}
		for chain := range chains {
			if isServiceChain(chain) && !wanted[chain] {
				ch.del[t] = append(ch.del[t], chain)
			}
		}
		// Insert missing jumps at the top, in reverse so they end up in
		// jumpRules' order.
		for i := len(jumpRules) - 1; i >= 0; i-- {
			j := jumpRules[i]
			if j.table == name && !hasRule(rules[j.chain], j) {
				ch.extra[name] = append(ch.extra[name], "-I "+j.chain+" 1 "+j.text())
			}
		}
		if s.localnetFirewall && name == "filter" {
			// Inserted last, so first in INPUT and OUTPUT, as kubelet's.
			ch.extra[name] = append(ch.extra[name], missingFirewallJumps(rules)...)
		}
		ch.write[t] = tables[t]
	}
	return ch, nil
}

// partialChanges compares with what was last written: only the chains
// whose rules changed are written, and the chains no longer rendered are
// deleted.
func (s *Syncer) partialChanges(tables [2][]*Chain) changes {
	var ch changes
	for t := range tableNames {
		for _, c := range tables[t] {
			if w, ok := s.written[t][c.Name]; ok && w.content == c.content() {
				w.seen = s.gen
				continue
			}
			ch.write[t] = append(ch.write[t], c)
		}
		for _, c := range ch.write[t] {
			if w, ok := s.written[t][c.Name]; ok {
				w.seen = s.gen // rewritten, not stale
			}
		}
		for name, w := range s.written[t] {
			if w.seen != s.gen {
				ch.del[t] = append(ch.del[t], name)
			}
		}
	}
	return ch
}

// remember records what an applied sync wrote and deleted.
func (s *Syncer) remember(tables [2][]*Chain, ch changes, full bool) {
	for t := range tableNames {
		if full || s.written[t] == nil {
			s.written[t] = make(map[string]*writtenChain, len(tables[t]))
		}
		for _, c := range ch.write[t] {
			s.written[t][c.Name] = &writtenChain{content: c.content(), seen: s.gen}
		}
		for _, name := range ch.del[t] {
			delete(s.written[t], name)
		}
	}
}

// parseSave reads chain names and rules per chain from iptables-save.
func parseSave(b []byte) (map[string]bool, map[string][]string) {
	chains := map[string]bool{}
	rules := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			chains[strings.Fields(line[1:])[0]] = true
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			rules[chain] = append(rules[chain], rule)
		}
	}
	return chains, rules
}

// hasRule tells whether a built-in chain already jumps as j does. iptables-
// save reorders matches, so compare the comment and the target.
func hasRule(rules []string, j jumpRule) bool {
	quoted := `--comment "` + j.comment + `"`
	for _, r := range rules {
		if strings.Contains(r, quoted) && strings.HasSuffix(strings.TrimSpace(r), "-j "+j.target) {
			return true
		}
	}
	return false
}
