// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package walkthrough

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// nodeRules is a node's rules as the program that lists them prints them
// whole: iptables-save of the nat table, or the nftables table.
func (cl *Cluster) nodeRules(ctx context.Context, netns string) (string, error) {
	if cl.Mode != agent.ModeNFTables {
		b, err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path(netns)).Save(ctx, "nat")
		return string(b), err
	}
	table := nftables.TableName
	if cl.KubeProxy {
		table = nftables.KubeProxyTableName
	}
	b, err := exec.CommandContext(ctx, "ip", "netns", "exec", netns, "nft", "list", "table", "ip", table).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list table ip %s: %w: %s", table, err, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// endpointCount counts the endpoints a node's rules give the first port of
// a Service (-1: none).
func (cl *Cluster) endpointCount(rules string, svc *corev1.Service) int {
	sp := svc.Spec.Ports[0]
	switch {
	case cl.Mode != agent.ModeNFTables:
		return iptables.EndpointJumps([]byte(rules), iptables.ServiceChain(svc.Namespace, svc.Name, sp.Name, sp.Protocol))
	case cl.KubeProxy:
		return nftables.KubeProxyEndpointCount(rules, svc.Namespace, svc.Name, sp.Name, sp.Protocol)
	default:
		dest := svc.Spec.ClusterIP + " . " + strings.ToLower(string(sp.Protocol)) + " . " + strconv.Itoa(int(sp.Port))
		return nftables.EndpointCount(rules, dest)
	}
}

// serviceRulesView is the shell pipeline the walkthrough shows for a
// Service's rules, and what its output must hold.
func (cl *Cluster) serviceRulesView(svc *corev1.Service, endpoints int) (string, []string) {
	key := svc.Namespace + "/" + svc.Name
	switch {
	case cl.Mode != agent.ModeNFTables:
		return "iptables-save -t nat | grep " + key,
			[]string{"-A KUBE-SERVICES", "-j KUBE-SVC-", "--mode random --probability", "-j KUBE-SEP-", "-j DNAT"}
	case cl.KubeProxy:
		return "nft list table ip " + nftables.KubeProxyTableName + " | grep -A1 " + key,
			[]string{"numgen random mod " + strconv.Itoa(endpoints), "dnat"}
	default:
		n := strconv.Itoa(endpoints)
		return fmt.Sprintf("nft list chain ip %[1]s endpoints; nft list map ip %[1]s endpoints-tcp-%[2]s | grep %[3]s",
				nftables.TableName, n, svc.Spec.ClusterIP),
			[]string{"numgen random mod " + n + " map @endpoints-tcp-" + n, svc.Spec.ClusterIP + " . tcp . 80 . 0 comment"}
	}
}
