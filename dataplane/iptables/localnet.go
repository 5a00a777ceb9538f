// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import "slices"

// ChainFirewall is kubelet's KUBE-FIREWALL, which kube-proxy writes too:
// with route_localnet=1 (localhost NodePorts), the kernel would accept
// packets for 127.0.0.0/8 from other hosts; this chain drops those that
// are not NodePort traffic being DNATed (kubernetes issue 90259). Like
// kube-proxy, the agent writes it on full syncs and never deletes it:
// kubelet may own it too.
const ChainFirewall = "KUBE-FIREWALL"

// localnetFirewallRule is kube-proxy's (and kubelet's) rule.
var localnetFirewallRule = comment("block incoming localnet connections") +
	" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"

func localnetFirewallChain() *Chain {
	return &Chain{Name: ChainFirewall, Rules: []string{localnetFirewallRule}}
}

// missingFirewallJumps are the restore lines that insert the jumps from
// INPUT and OUTPUT to KUBE-FIREWALL that the live rules lack.
func missingFirewallJumps(live map[string][]string) []string {
	var out []string
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if !slices.Contains(live[chain], "-j "+ChainFirewall) {
			out = append(out, "-I "+chain+" 1 -j "+ChainFirewall)
		}
	}
	return out
}
