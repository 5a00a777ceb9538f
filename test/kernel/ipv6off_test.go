// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// A node whose kernel has IPv6 disabled (net.ipv6.conf.all.disable_ipv6)
// gets IPv4 rules only, as kube-proxy decides, even though nft's ip6
// family works there.
func TestAgentLeavesIPv6OutWhereDisabled(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	c := newBareCluster(t, agent.ModeNFTables, "svcnet-v6off", 1)
	n := c.nodes[0]
	_, err := c.lab.Run(n.NetNS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	g.Expect(err).NotTo(HaveOccurred())
	c.startAgent(t, n)

	g.Eventually(func() (string, error) { return netlabRun(netlab.Path(n.NetNS), "nft", "list", "tables") }).
		WithTimeout(converge).WithPolling(poll).Should(ContainSubstring("table ip svcnet"), "the IPv4 rules")
	g.Eventually(func() (string, error) {
		b, err := os.ReadFile(filepath.Join(c.logDir, n.Name+".log"))
		return string(b), err
	}).WithTimeout(converge).WithPolling(poll).Should(ContainSubstring("disable_ipv6 is set"), "the agent says why")
	g.Consistently(func() (string, error) { return netlabRun(netlab.Path(n.NetNS), "nft", "list", "tables") }).
		WithTimeout(2*time.Second).WithPolling(poll).ShouldNot(ContainSubstring("table ip6 svcnet"), "no IPv6 rules")
	out, err := netlabRun(netlab.Path(n.NetNS), "nft", "list", "tables")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(out, "svcnet")).To(Equal(1), out)
}
