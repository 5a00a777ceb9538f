// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestNetlabDualStack: the network svcnet up --ip-family=dual builds. Two
// nodes with an address and a Pod CIDR of each family, a Pod on each with
// both addresses, and a client outside: every Pod answers the other Pod
// and the client over each family, with the sender's own address of that
// family seen (no NAT on the way), and the Service ranges of each family
// are refused by the fabric rather than left to time out.
func TestNetlabDualStack(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	p := netip.MustParsePrefix
	lab, err := netlab.New(fmt.Sprintf("svcnet-ds%04d", rand.IntN(10000)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(lab.Close)
	services := []netip.Prefix{p("10.96.0.0/16"), p("fd00:10:96::/112")}
	g.Expect(lab.RefuseUnserved(p("172.30.0.1/24"), services[0])).To(Succeed())
	g.Expect(lab.RefuseUnserved(p("fc00:f853:ccd:e793::1/64"), services[1])).To(Succeed())

	var nodes []*netlab.Node
	for i := 1; i <= 2; i++ {
		n, err := lab.AddNode(fmt.Sprintf("node-%d", i), p(fmt.Sprintf("172.30.0.%d/24", 10+i)), p(fmt.Sprintf("10.244.%d.0/24", i)), services...)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.AddFamily(p(fmt.Sprintf("fc00:f853:ccd:e793::%d/64", 10+i)), p(fmt.Sprintf("fd00:10:244:%d::/64", i)), services...)).To(Succeed())
		g.Expect(n.AddFamily(p("172.30.0.99/24"), p("10.244.99.0/24"))).To(MatchError(ContainSubstring("of the family it does not have")))
		nodes = append(nodes, n)
	}
	g.Expect(nodes[0].Route(nodes[1])).To(Succeed())
	g.Expect(nodes[1].Route(nodes[0])).To(Succeed())
	client, err := lab.AddClient("client", p("172.30.0.100/24"), p("fc00:f853:ccd:e793::100/64"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range nodes {
		for i, cidr := range n.PodCIDRs {
			g.Expect(lab.RouteVia(client, cidr, n.IPs[i])).To(Succeed())
		}
	}

	var pods []*netlab.Pod
	for i, n := range nodes {
		pod, err := n.AddPod(fmt.Sprintf("pod-%d", i+1), 8080)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pod.IPs).To(HaveLen(2))
		g.Expect(pod.IPs[0].Is4() && pod.IPs[1].Is6()).To(BeTrue(), "addresses %v", pod.IPs)
		pods = append(pods, pod)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for fam := range 2 {
		for _, tc := range []struct {
			from, name string
			want       netip.Addr
		}{
			{pods[0].NetNS, "the other node's Pod", pods[0].IPs[fam]},
			{client, "the client", map[int]netip.Addr{0: netip.MustParseAddr("172.30.0.100"), 1: netip.MustParseAddr("fc00:f853:ccd:e793::100")}[fam]},
		} {
			target := pods[1].IPs[fam]
			url := "http://" + net.JoinHostPort(target.String(), "8080") + "/"
			body, err := netlab.Get(ctx, netlab.Client(tc.from, 5*time.Second), url)
			g.Expect(err).NotTo(HaveOccurred(), "%s to %s", tc.name, url)
			// "<pod name> <client ip> <local ip>"
			g.Expect(strings.Fields(body)).To(Equal([]string{"pod-2", tc.want.String(), target.String()}), "%s to %s", tc.name, url)
		}
	}

	// A node's own connection to a Service address no rule catches is
	// refused by the fabric in both families.
	for _, ip := range []string{"10.96.0.50", "fd00:10:96::50"} {
		_, err := lab.Run(nodes[0].NetNS, "curl", "-sS", "--max-time", "5", "http://"+net.JoinHostPort(ip, "80")+"/")
		// curl: (7) is "Couldn't connect to server": refused, not a timeout (28).
		g.Expect(err).To(MatchError(ContainSubstring("curl: (7)")), "to %s", ip)
	}
}
