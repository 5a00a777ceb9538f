// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// fixedChains are the chains every ruleset has, beside the per-service ones.
var fixedChains = []string{
	ChainServices, ChainNodePorts, ChainExternalServices, ChainForward,
	ChainProxyFirewall, ChainPostrouting, ChainMarkMasq,
}

// ipvsChains are the chains only kube-proxy's ipvs mode writes (its
// others are the iptables mode's names); kube-proxy's cleanup of that
// mode removes them.
var ipvsChains = []string{"KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"}

// isOwnedChain tells whether a chain belongs to this dataplane (and so to
// kube-proxy's iptables mode, whose names it shares) or to kube-proxy's
// ipvs mode, which a node leaving kube-proxy may have run.
func isOwnedChain(name string) bool {
	return isServiceChain(name) || slices.Contains(fixedChains, name) || name == ChainCanary || isIPVSChain(name)
}

func isIPVSChain(name string) bool { return slices.Contains(ipvsChains, name) }

// Cleanup removes every chain this dataplane owns, and kube-proxy's ipvs
// mode's, from the filter and nat tables, with the jumps into them from
// other chains, in one restore: what kube-proxy's --cleanup does for its
// iptables and ipvs modes. Chains and rules of other programs stay.
func Cleanup(ctx context.Context, ipt Interface) error {
	return cleanupChains(ctx, ipt, isOwnedChain, true)
}

// CleanupIPVS removes only the chains of kube-proxy's ipvs mode that the
// iptables mode does not share, with the jumps into them: in iptables
// mode the agent's full sync rewrites the shared ones.
func CleanupIPVS(ctx context.Context, ipt Interface) error {
	return cleanupChains(ctx, ipt, isIPVSChain, false)
}

func cleanupChains(ctx context.Context, ipt Interface, owned func(string) bool, canary bool) error {
	var filter, nat cleanupPlan
	for _, t := range []struct {
		name string
		plan *cleanupPlan
	}{{"filter", &filter}, {"nat", &nat}} {
		live, err := ipt.Save(ctx, t.name)
		if err != nil {
			return err
		}
		*t.plan = planCleanup(live, owned)
	}
	// The mangle table holds the canary alone; it is not dumped, which
	// with iptables-legacy would create the table.
	mangleCanary := false
	if canary {
		var err error
		if _, mangleCanary, err = ipt.ChainRules(ctx, "mangle", ChainCanary); err != nil {
			return err
		}
	}
	if filter.empty() && nat.empty() && !mangleCanary {
		return nil
	}
	var b strings.Builder
	filter.write(&b, "filter")
	nat.write(&b, "nat")
	if mangleCanary {
		b.WriteString("*mangle\n:" + ChainCanary + " - [0:0]\n-X " + ChainCanary + "\nCOMMIT\n")
	}
	if err := ipt.Restore(ctx, []byte(b.String())); err != nil {
		return fmt.Errorf("removing %d chains: %w", len(filter.chains)+len(nat.chains), err)
	}
	return nil
}

// cleanupPlan is what to remove from one table: the rules of other chains
// that jump into owned chains, and the owned chains.
type cleanupPlan struct {
	jumps  []string // "CHAIN rule"
	chains []string
}

func planCleanup(save []byte, owned func(string) bool) cleanupPlan {
	chains, rules := parseSave(save)
	var p cleanupPlan
	for chain := range chains {
		if owned(chain) {
			p.chains = append(p.chains, chain)
			continue
		}
		for _, r := range rules[chain] {
			if target, ok := jumpTarget(r); ok && owned(target) {
				p.jumps = append(p.jumps, chain+" "+r)
			}
		}
	}
	slices.Sort(p.chains)
	slices.Sort(p.jumps)
	return p
}

func (p cleanupPlan) empty() bool { return len(p.jumps) == 0 && len(p.chains) == 0 }

// write renders the plan for a --noflush restore: every owned chain is
// flushed (declared) and the jumps into them deleted, so that none is
// referenced when the chains are deleted.
func (p cleanupPlan) write(b *strings.Builder, table string) {
	if p.empty() {
		return
	}
	b.WriteString("*" + table + "\n")
	for _, c := range p.chains {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, j := range p.jumps {
		b.WriteString("-D " + j + "\n")
	}
	for _, c := range p.chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
}

// jumpTarget returns the target of a rule's -j.
func jumpTarget(rule string) (string, bool) {
	fields := strings.Fields(rule)
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" {
			return fields[i+1], true
		}
	}
	return "", false
}
