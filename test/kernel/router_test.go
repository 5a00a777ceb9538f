// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestRouterSendsNoRedirects: a client reaches a server on its own
// segment through a router, as svcnet up's client reaches the nodes'
// LoadBalancer addresses, with connections the server refuses. A
// namespace that merely forwards sends the client ICMP redirects to the
// server (the control); netlab's AddRouter sends none. With redirects,
// the failover benchmark's client kept reaching a cut node after the
// router had dropped it.
func TestRouterSendsNoRedirects(t *testing.T) {
	requireKernel(t)
	forwarding := func(lab *netlab.Lab, name string, ip netip.Prefix) (string, error) {
		ns, err := lab.AddClient(name, ip)
		if err == nil {
			_, err = lab.Run(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		}
		return ns, err
	}
	for _, tc := range []struct {
		name       string
		router     func(*netlab.Lab, string, netip.Prefix) (string, error)
		redirected bool
	}{
		{"a forwarding namespace redirects", forwarding, true},
		{"AddRouter does not", func(l *netlab.Lab, name string, ip netip.Prefix) (string, error) { return l.AddRouter(name, ip) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			lab, err := netlab.New(fmt.Sprintf("svcnet-rt%04d", rand.IntN(10000)))
			g.Expect(err).NotTo(HaveOccurred())
			t.Cleanup(lab.Close)
			client, err := lab.AddClient("client", netip.MustParsePrefix("192.168.63.100/24"))
			g.Expect(err).NotTo(HaveOccurred())
			server, err := lab.AddClient("server", netip.MustParsePrefix("192.168.63.20/24"))
			g.Expect(err).NotTo(HaveOccurred())
			router, err := tc.router(lab, "router", netip.MustParsePrefix("192.168.63.254/24"))
			g.Expect(err).NotTo(HaveOccurred())
			mustRun(t, lab, server, "ip", "addr", "add", "10.63.0.1/32", "dev", "lo")
			mustRun(t, lab, router, "ip", "route", "add", "10.63.0.1/32", "via", "192.168.63.20")
			mustRun(t, lab, client, "ip", "route", "add", "default", "via", "192.168.63.254")
			// A connection through the router: refused by the server, whose
			// reset goes straight back; the SYN is what the router forwards.
			dial := netns.DialContext(netlab.Path(client))
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if c, err := dial(ctx, "tcp", "10.63.0.1:80"); err == nil {
					_ = c.Close()
				} else {
					g.Expect(err.Error()).To(ContainSubstring("refused"))
				}
				cancel()
			}
			snmp, err := lab.Run(router, "cat", "/proc/net/snmp")
			g.Expect(err).NotTo(HaveOccurred())
			if sent := icmpOutRedirects(t, snmp); tc.redirected {
				g.Expect(sent).To(BeNumerically(">", 0), "the router's ICMP counters:\n%s", snmp)
			} else {
				g.Expect(sent).To(BeZero(), "the router's ICMP counters:\n%s", snmp)
			}
		})
	}
}

// icmpOutRedirects reads IcmpOutRedirects from /proc/net/snmp.
func icmpOutRedirects(t *testing.T, snmp string) int {
	t.Helper()
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Icmp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		i := slices.Index(names, "OutRedirects")
		if i < 0 || i >= len(fields) {
			break
		}
		n, err := strconv.Atoi(fields[i])
		if err != nil {
			t.Fatalf("IcmpOutRedirects %q: %v", fields[i], err)
		}
		return n
	}
	t.Fatalf("no Icmp OutRedirects in /proc/net/snmp:\n%s", snmp)
	return 0
}
