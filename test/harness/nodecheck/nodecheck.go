// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodecheck reads what proxies left on a node, through a runner
// of commands in the node's network namespace, for the tests of the
// moves between kube-proxy and svcnet's agent.
package nodecheck

import (
	"strings"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// Run runs a command (argv) in the node's network namespace and returns
// its output.
type Run func(argv ...string) (string, error)

// KubeProxyLeftovers is what kube-proxy left on a node the agent serves
// in mode, one line each: its nftables tables, its ipvs mode's chains and
// device, and in nftables mode any KUBE- chain but kubelet's
// KUBE-FIREWALL, which kube-proxy writes too and never removes (its
// --cleanup keeps it: kubelet may own it). Empty: nothing.
func KubeProxyLeftovers(run Run, mode string) string {
	var left []string
	tables, _ := run("nft", "list", "tables")
	if strings.Contains(tables, nftables.KubeProxyTableName) {
		left = append(left, tables)
	}
	save, _ := run("iptables-save")
	for _, l := range strings.Split(save, "\n") {
		switch {
		case !strings.HasPrefix(l, ":KUBE-") || strings.HasPrefix(l, ":"+iptables.ChainFirewall+" "):
		case mode == agent.ModeNFTables || strings.HasPrefix(l, ":KUBE-LOAD-BALANCER "):
			left = append(left, l)
		}
	}
	if links, _ := run("ip", "-o", "link"); strings.Contains(links, "kube-ipvs0") {
		left = append(left, "the kube-ipvs0 device")
	}
	return strings.Join(left, "\n")
}

// HasSvcnetTable says whether svcnet's IPv4 nftables table is on the node.
func HasSvcnetTable(run Run) bool {
	tables, _ := run("nft", "list", "tables")
	return strings.Contains(tables, "table ip "+nftables.TableName+"\n")
}
