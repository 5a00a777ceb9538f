// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestCleanupRemovesEveryMode checks that --cleanup removes what every
// mode left on the node, svcnet's and kube-proxy's (its ipvs mode's
// chains and kube-ipvs0 device included), as kube-proxy's --cleanup does,
// and leaves other programs' rules alone.
func TestCleanupRemovesEveryMode(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	lab, err := netlab.New(fmt.Sprintf("svcnet-kc%04d", time.Now().UnixNano()%10000))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(lab.Close)
	n, err := lab.AddNode("node1", netip.MustParsePrefix("192.168.51.11/24"), netip.MustParsePrefix("10.244.1.0/24"), serviceCIDR)
	g.Expect(err).NotTo(HaveOccurred())
	run := func(argv ...string) string {
		t.Helper()
		out, err := lab.Run(n.NetNS, argv...)
		g.Expect(err).NotTo(HaveOccurred(), "%v: %s", argv, out)
		return out
	}
	for _, table := range []string{nftables.TableName, nftables.KubeProxyTableName, "other"} {
		run("nft", "add", "table", "ip", table)
		run("nft", "add", "table", "ip6", table)
	}
	for _, ipt := range []string{"iptables", "ip6tables"} {
		run(ipt, "-t", "nat", "-N", "KUBE-SERVICES")
		run(ipt, "-t", "nat", "-A", "OUTPUT", "-j", "KUBE-SERVICES")
		run(ipt, "-t", "filter", "-N", "KUBE-FORWARD")
		run(ipt, "-t", "filter", "-A", "FORWARD", "-j", "KUBE-FORWARD")
		run(ipt, "-t", "filter", "-N", "OTHER")
		run(ipt, "-t", "nat", "-N", "KUBE-LOAD-BALANCER")
		run(ipt, "-t", "nat", "-A", "KUBE-SERVICES", "-j", "KUBE-LOAD-BALANCER")
		run(ipt, "-t", "filter", "-N", "KUBE-IPVS-FILTER")
		run(ipt, "-t", "filter", "-A", "INPUT", "-j", "KUBE-IPVS-FILTER")
	}
	// ipvs mode's dummy device (a veth here: this kernel may lack dummy);
	// only its name matters.
	run("ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kube-ipvs0p")

	cmd := exec.Command(os.Args[0], "--cleanup")
	cmd.Env = append(os.Environ(), agentProcessEnv+"="+agentProcess)
	out, err := netnsOutput(n, cmd)
	g.Expect(err).NotTo(HaveOccurred(), "--cleanup: %s", out)

	for _, family := range []string{"ip", "ip6"} {
		tables := run("nft", "list", "tables", family)
		g.Expect(tables).NotTo(ContainSubstring(nftables.TableName+"\n"), family)
		g.Expect(tables).NotTo(ContainSubstring(nftables.KubeProxyTableName), family)
		g.Expect(tables).To(ContainSubstring("other"), family)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		rules := run(save)
		g.Expect(rules).NotTo(ContainSubstring("KUBE-"), save)
		g.Expect(rules).To(ContainSubstring(":OTHER"), save)
	}
	g.Expect(run("ip", "-o", "link")).NotTo(ContainSubstring("kube-ipvs0"))
}

// netnsOutput runs cmd inside node n's network namespace and returns its
// combined output.
func netnsOutput(n *netlab.Node, cmd *exec.Cmd) (string, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := netns.Run(netlab.Path(n.NetNS), cmd)
	return out.String(), err
}
