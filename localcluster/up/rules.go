// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// rulesCommand is how an operator lists a node's Service rules of family
// f in a mode.
func rulesCommand(mode ProxyMode, kubeProxy bool, f corev1.IPFamily) string {
	save, nftFamily := "iptables-save", "ip"
	if f == corev1.IPv6Protocol {
		save, nftFamily = "ip6tables-save", "ip6"
	}
	switch {
	case mode != agent.ModeNFTables:
		return save + " -t nat | grep KUBE-SVC"
	case kubeProxy:
		return "nft list table " + nftFamily + " " + nftables.KubeProxyTableName
	default:
		return "nft list table " + nftFamily + " " + nftables.TableName
	}
}
