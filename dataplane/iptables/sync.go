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
	written  [2]map[string]*writtenChain // filter, nat: chain -> what was written
	gen      uint64
	needFull bool
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

// Sync applies rs.
func (s *Syncer) Sync(ctx context.Context, rs *Ruleset) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	full := s.needFull || s.written[0] == nil
	tables := [2][]*Chain{rs.Filter, rs.NAT}

	var res Result
	var write [2][]*Chain
	var del [2][]string
	extra := map[string][]string{}
	if full {
		res.Full = true
		for t, name := range tableNames {
			live, err := s.ipt.Save(ctx, name)
			if err != nil {
				return res, err
			}
			chains, rules := parseSave(live)
			wanted := make(map[string]bool, len(tables[t]))
			for _, c := range tables[t] {
				wanted[c.Name] = true
			}
			for chain := range chains {
				if isServiceChain(chain) && !wanted[chain] {
					del[t] = append(del[t], chain)
				}
			}
			// Insert missing jumps at the top, in reverse so they end up
			// in jumpRules' order.
			for i := len(jumpRules) - 1; i >= 0; i-- {
				j := jumpRules[i]
				if j.table == name && !hasRule(rules[j.chain], j) {
					extra[name] = append(extra[name], "-I "+j.chain+" 1 "+j.text())
				}
			}
			write[t] = tables[t]
		}
	} else {
		for t := range tableNames {
			for _, c := range tables[t] {
				if w, ok := s.written[t][c.Name]; ok && w.content == c.content() {
					w.seen = s.gen
					continue
				}
				write[t] = append(write[t], c)
			}
			for _, c := range write[t] {
				if w, ok := s.written[t][c.Name]; ok {
					w.seen = s.gen // rewritten, not stale
				}
			}
			for name, w := range s.written[t] {
				if w.seen != s.gen {
					del[t] = append(del[t], name)
				}
			}
		}
	}
	for t := range tableNames {
		res.Chains += len(write[t])
		for _, c := range write[t] {
			res.Rules += len(c.Rules)
		}
		res.Deleted += len(del[t])
		slices.Sort(del[t])
	}
	if res.Chains == 0 && res.Deleted == 0 && len(extra) == 0 {
		return res, nil
	}
	data := restoreText(write[0], write[1], extra, del[0], del[1])
	if err := s.ipt.Restore(ctx, data); err != nil {
		s.needFull = true
		return res, fmt.Errorf("applying %d chains: %w", res.Chains, err)
	}
	for t := range tableNames {
		if full || s.written[t] == nil {
			s.written[t] = make(map[string]*writtenChain, len(tables[t]))
		}
		for _, c := range write[t] {
			s.written[t][c.Name] = &writtenChain{content: c.content(), seen: s.gen}
		}
		for _, name := range del[t] {
			delete(s.written[t], name)
		}
	}
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
