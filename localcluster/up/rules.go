// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// rulesCommand is how an operator lists a node's Service rules in a mode.
func rulesCommand(mode ProxyMode, kubeProxy bool) string {
	switch {
	case mode != agent.ModeNFTables:
		return "iptables-save -t nat | grep KUBE-SVC"
	case kubeProxy:
		return "nft list table ip " + nftables.KubeProxyTableName
	default:
		return "nft list table ip " + nftables.TableName
	}
}
