package iptables

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	written  map[string]string // "table/chain" -> rules last written
	needFull bool
}

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

// Sync applies rs.
func (s *Syncer) Sync(ctx context.Context, rs *Ruleset) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	full := s.needFull
	desired := map[string]string{}
	for _, c := range rs.Filter {
		desired["filter/"+c.Name] = c.content()
	}
	for _, c := range rs.NAT {
		desired["nat/"+c.Name] = c.content()
	}

	var res Result
	var include func(string, *Chain) bool
	extra := map[string][]string{}
	var delFilter, delNAT []string
	if full {
		res.Full = true
		for _, table := range []string{"filter", "nat"} {
			live, err := s.ipt.Save(ctx, table)
			if err != nil {
				return res, err
			}
			chains, rules := parseSave(live)
			for name := range chains {
				if isServiceChain(name) {
					if _, ok := desired[table+"/"+name]; !ok {
						if table == "filter" {
							delFilter = append(delFilter, name)
						} else {
							delNAT = append(delNAT, name)
						}
					}
				}
			}
			// Insert missing jumps at the top, in reverse so they end up
			// in jumpRules' order.
			for i := len(jumpRules) - 1; i >= 0; i-- {
				j := jumpRules[i]
				if j.table != table || hasRule(rules[j.chain], j) {
					continue
				}
				extra[table] = append(extra[table], "-I "+j.chain+" 1 "+j.text())
			}
		}
	} else {
		include = func(table string, c *Chain) bool {
			prev, ok := s.written[table+"/"+c.Name]
			return !ok || prev != c.content()
		}
		for key := range s.written {
			if _, ok := desired[key]; ok {
				continue
			}
			table, name, _ := strings.Cut(key, "/")
			if table == "filter" {
				delFilter = append(delFilter, name)
			} else {
				delNAT = append(delNAT, name)
			}
		}
	}
	for _, tc := range []struct {
		table  string
		chains []*Chain
	}{{"filter", rs.Filter}, {"nat", rs.NAT}} {
		for _, c := range tc.chains {
			if include == nil || include(tc.table, c) {
				res.Chains++
				res.Rules += len(c.Rules)
			}
		}
	}
	res.Deleted = len(delFilter) + len(delNAT)
	if res.Chains == 0 && res.Deleted == 0 && len(extra) == 0 {
		return res, nil
	}
	slices.Sort(delFilter)
	slices.Sort(delNAT)
	data := rs.restoreText(include, extra, delFilter, delNAT)
	if err := s.ipt.Restore(ctx, data); err != nil {
		s.needFull = true
		return res, fmt.Errorf("applying %d chains: %w", res.Chains, err)
	}
	s.written = desired
	s.needFull = false
	return res, nil
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
