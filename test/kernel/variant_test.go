// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// addLegacyRules writes n rules with iptables-legacy in namespace ns, as
// a host whose programs use the legacy backend has them.
func addLegacyRules(t *testing.T, lab *netlab.Lab, ns string, n int) {
	t.Helper()
	for i := range n {
		if _, err := lab.Run(ns, "iptables-legacy", "-A", "INPUT", "-s", fmt.Sprintf("198.51.100.%d", i+1), "-j", "ACCEPT"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVariantDetection checks DetectVariant's choices on namespaces made
// to look like hosts of each kind.
func TestVariantDetection(t *testing.T) {
	requireKernel(t)
	ctx := context.Background()
	lab, err := netlab.New(fmt.Sprintf("svcnet-kv%04d", rand.IntN(10000)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	hosts := 0
	host := func() string {
		hosts++
		ns, err := lab.AddClient(fmt.Sprintf("h%d", hosts), netip.MustParsePrefix(fmt.Sprintf("192.168.60.%d/24", hosts)))
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	for name, tc := range map[string]struct {
		setup func(ns string)
		want  iptables.Variant
	}{
		"a node without rules":          {func(string) {}, iptables.VariantNFT},
		"a node whose rules are legacy": {func(ns string) { addLegacyRules(t, lab, ns, 12) }, iptables.VariantLegacy},
		"legacy rules, but kubelet's hint chain in iptables-nft": {func(ns string) {
			addLegacyRules(t, lab, ns, 12)
			if _, err := lab.Run(ns, "iptables-nft", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT"); err != nil {
				t.Fatal(err)
			}
		}, iptables.VariantNFT},
		"kubelet's canary in iptables-legacy, more rules in nft": {func(ns string) {
			if _, err := lab.Run(ns, "iptables-legacy", "-t", "mangle", "-N", "KUBE-KUBELET-CANARY"); err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := lab.Run(ns, "iptables-nft", "-A", "INPUT", "-s", fmt.Sprintf("203.0.113.%d", i+1), "-j", "ACCEPT"); err != nil {
					t.Fatal(err)
				}
			}
		}, iptables.VariantLegacy},
	} {
		t.Run(name, func(t *testing.T) {
			ns := host()
			tc.setup(ns)
			if got := iptables.DetectVariant(ctx, netlab.Path(ns)); got.Variant != tc.want {
				t.Errorf("detected %+v, want %s", got, tc.want)
			}
		})
	}
}

// TestAgentOnALegacyNode runs the iptables agent on a node whose rules are
// iptables-legacy ones: its rules must land there, beside the node's, and
// serve; iptables-nft must hold none of them.
func TestAgentOnALegacyNode(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, agent.ModeIPTables, "svcnet-kl", 1, endpointslice.ControllerName)
	n := c.nodes[0]
	addLegacyRules(t, c.lab, n.NetNS, 12)
	c.startAgent(t, n)
	ns, err := c.env.Namespace(ctx, t.Name())
	g.Expect(err).NotTo(HaveOccurred())
	c.addPods(t, ns, "legacy", n, 1)
	svc := c.service(t, webService(ns, "legacy"))
	hc := netlab.Client(n.NetNS, 2*time.Second)
	g.Eventually(func() (string, error) { return netlab.Get(ctx, hc, "http://"+svc.Spec.ClusterIP+":80/") }).
		WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"))
	legacy, err := c.lab.Run(n.NetNS, "iptables-legacy-save", "-t", "nat")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(legacy).To(ContainSubstring(svc.Spec.ClusterIP))
	nft, _ := c.lab.Run(n.NetNS, "iptables-nft-save", "-t", "nat")
	g.Expect(strings.Contains(nft, "KUBE-SERVICES")).To(BeFalse(), "iptables-nft holds svcnet's rules:\n%s", nft)
}
