// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// knftablesOnly hides the netlink element writer of NewInterface's
// interface: every element then goes through knftables, as nft text.
type knftablesOnly struct{ knftables.Interface }

// elementsBlock matches a set's or map's elements in nft's listing.
var elementsBlock = regexp.MustCompile(`(?s)elements = \{(.*?)\}`)

// listing is the node's table as nft lists it, with its sets, maps and
// chains in name order and every set's elements sorted: nft lists objects
// in the order they were made, and the kernel's hash sets their elements
// in an order of their own.
func listing(t *testing.T, node string, fam string) string {
	t.Helper()
	out, err := netlabRun(node, "nft", "list", "table", fam, nftables.TableName)
	if err != nil {
		t.Fatalf("nft list table: %v: %s", err, out)
	}
	out = elementsBlock.ReplaceAllStringFunc(out, func(block string) string {
		inner := elementsBlock.FindStringSubmatch(block)[1]
		var elems []string
		for _, e := range strings.Split(inner, ",") {
			elems = append(elems, strings.Join(strings.Fields(e), " "))
		}
		slices.Sort(elems)
		return "elements = { " + strings.Join(elems, ", ") + " }"
	})
	var objects []string
	var cur []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t") && strings.HasSuffix(line, "{") {
			cur = []string{line}
			continue
		}
		if cur != nil {
			cur = append(cur, line)
			if line == "\t}" {
				objects = append(objects, strings.Join(cur, "\n"))
				cur = nil
			}
		}
	}
	slices.Sort(objects)
	return strings.Join(objects, "\n")
}

// netlinkCase is a set of Services touching every data set and map of
// the table, in one family.
type netlinkCase struct {
	family  corev1.IPFamily
	nftFam  string
	addr    func(i int) string // the i-th address of the family
	cidr    string
	nodeIPs []netip.Addr
}

func (c netlinkCase) ip(i int) netip.Addr { return netip.MustParseAddr(c.addr(i)) }

func (c netlinkCase) endpoints(from, n int, local bool) []model.Endpoint {
	var eps []model.Endpoint
	for i := range n {
		eps = append(eps, model.Endpoint{IP: c.ip(100 + from + i), Port: 8080, Local: local})
	}
	return eps
}

// services are the case's Services; gen changes one endpoint of web.
func (c netlinkCase) services(gen int) map[types.NamespacedName][]*model.ServicePort {
	port := func(name string, proto corev1.Protocol, ip int, p int32) *model.ServicePort {
		return &model.ServicePort{Name: "ns/" + name + ":p", Namespace: "ns", Service: name, Protocol: proto,
			ClusterIP: c.ip(ip), Port: p, HasEndpoints: true}
	}
	web := port("web", corev1.ProtocolTCP, 1, 80)
	web.ClusterEndpoints = c.endpoints(gen*10, 2, false)
	dns := port("dns", corev1.ProtocolUDP, 2, 53)
	dns.ClusterEndpoints = c.endpoints(20, 3, false)
	sctp := port("sctp", corev1.ProtocolSCTP, 3, 9999)
	sctp.ClusterEndpoints = c.endpoints(30, 1, false)
	np := port("np", corev1.ProtocolTCP, 4, 80)
	np.NodePort, np.ExternalPolicyLocal, np.HealthCheckNodePort = 30080, true, 30081
	np.ClusterEndpoints, np.LocalEndpoints = c.endpoints(40, 2, false), c.endpoints(42, 1, true)
	np.ClusterEndpoints = append(np.ClusterEndpoints, np.LocalEndpoints...)
	lb := port("lb", corev1.ProtocolTCP, 5, 443)
	lb.NodePort, lb.ExternalIPs, lb.LoadBalancerIPs = 30443, []netip.Addr{c.ip(50)}, []netip.Addr{c.ip(51)}
	lb.LoadBalancerSources = []netip.Prefix{netip.MustParsePrefix(c.cidr), netip.PrefixFrom(c.ip(60), c.ip(60).BitLen())}
	lb.ClusterEndpoints = c.endpoints(50, 4, false)
	empty := port("empty", corev1.ProtocolTCP, 6, 80)
	empty.HasEndpoints, empty.NodePort = false, 30090
	sticky := port("sticky", corev1.ProtocolTCP, 7, 80)
	sticky.AffinitySeconds = 600
	sticky.ClusterEndpoints = c.endpoints(70, 2, false)
	return map[types.NamespacedName][]*model.ServicePort{
		{Namespace: "ns", Name: "web"}: {web}, {Namespace: "ns", Name: "dns"}: {dns}, {Namespace: "ns", Name: "sctp"}: {sctp}, {Namespace: "ns", Name: "np"}: {np}, {Namespace: "ns", Name: "lb"}: {lb}, {Namespace: "ns", Name: "empty"}: {empty}, {Namespace: "ns", Name: "sticky"}: {sticky},
	}
}

func syncAll(t *testing.T, b *nftables.Backend, services map[types.NamespacedName][]*model.ServicePort, node dataplane.Node) {
	t.Helper()
	for k, ports := range services {
		b.SetService(k, ports)
	}
	if _, err := b.Sync(context.Background(), node); err != nil {
		t.Fatal(err)
	}
}

// The elements written over netlink are, as nft reads them back, the
// ones nft writes from knftables' text: every data set and map of both
// families (keys with buckets, ports, protocols, source ranges, comments),
// after a cold sync, an endpoint change, a change of endpoint count and a
// restarted agent's full sync over the table.
func TestNFTablesNetlinkElementsAsNFTWritesThem(t *testing.T) {
	cases := []netlinkCase{
		{family: corev1.IPv4Protocol, nftFam: "ip", addr: func(i int) string { return fmt.Sprintf("10.%d.0.%d", 96+i/250, i%250+1) },
			cidr: "203.0.113.0/25", nodeIPs: []netip.Addr{netip.MustParseAddr("192.168.7.2")}},
		{family: corev1.IPv6Protocol, nftFam: "ip6", addr: func(i int) string { return fmt.Sprintf("fd00:96::%x", i+1) },
			cidr: "2001:db8:1::/48", nodeIPs: []netip.Addr{netip.MustParseAddr("fd00:7::2")}},
	}
	for _, c := range cases {
		t.Run(string(c.family), func(t *testing.T) {
			ctx := context.Background()
			viaNetlink, viaText := nftNode(t, "svcnet-nl-"+c.nftFam), nftNode(t, "svcnet-txt-"+c.nftFam)
			nl, err := nftables.NewInterface(c.family, nftables.TableName, viaNetlink)
			if err != nil {
				t.Fatal(err)
			}
			txt, err := nftables.NewInterface(c.family, nftables.TableName, viaText)
			if err != nil {
				t.Fatal(err)
			}
			node := dataplane.Node{NodePortIPs: c.nodeIPs}
			b := nftables.NewBackend(c.family, nl, nftables.Config{})
			compare := func(step string, services map[types.NamespacedName][]*model.ServicePort) {
				t.Helper()
				ref := nftables.NewBackend(c.family, knftablesOnly{txt}, nftables.Config{})
				if err := nftables.Cleanup(ctx, txt); err != nil {
					t.Fatal(err)
				}
				syncAll(t, ref, services, node)
				got, want := listing(t, viaNetlink, c.nftFam), listing(t, viaText, c.nftFam)
				if got != want {
					t.Fatalf("%s: the table written over netlink differs from nft's:\n--- netlink\n%s\n--- nft\n%s", step, got, want)
				}
				if !strings.Contains(got, "elements = {") {
					t.Fatalf("%s: no elements in the table:\n%s", step, got)
				}
			}
			services := c.services(0)
			syncAll(t, b, services, node)
			compare("cold sync", services)

			services = c.services(1)
			syncAll(t, b, services, node)
			compare("endpoint change", services)

			services[types.NamespacedName{Namespace: "ns", Name: "web"}][0].ClusterEndpoints = c.endpoints(90, 5, false)
			syncAll(t, b, services, node)
			compare("endpoint count change", services)

			delete(services, types.NamespacedName{Namespace: "ns", Name: "dns"})
			b.SetService(types.NamespacedName{Namespace: "ns", Name: "dns"}, nil)
			restarted := nftables.NewBackend(c.family, nl, nftables.Config{})
			syncAll(t, restarted, services, node)
			compare("restart without a Service", services)
		})
	}
}

// A netlink transaction the kernel refuses (an element gone from under
// the agent) leaves the table as it was and reports not found; the next
// sync is full and repairs the table.
func TestNFTablesNetlinkFailureIsTypedAndRecovers(t *testing.T) {
	ctx := context.Background()
	node := nftNode(t, "svcnet-nl-fail")
	nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, node)
	if err != nil {
		t.Fatal(err)
	}
	b := nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.1.1"))
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	if out, err := netlabRun(node, "nft", "delete", "element", "ip", "svcnet", "endpoints-tcp-1", "{ 10.96.0.10 . tcp . 80 . 0 }"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.9.9"))
	_, err = b.Sync(ctx, dataplane.Node{})
	if !nftables.IsNotFound(err) {
		t.Fatalf("deleting an element that is gone: got %v, want a not-found error", err)
	}
	if out := listing(t, node, "ip"); strings.Contains(out, "10.244.9.9") || !strings.Contains(out, "10.244.1.1 . 10.244.1.1") {
		t.Fatalf("the refused transaction changed the table:\n%s", out)
	}
	res, err := b.Sync(ctx, dataplane.Node{})
	if err != nil || !res.Full {
		t.Fatalf("the sync after a failure: %+v, %v; want a full sync that succeeds", res, err)
	}
	if out := listing(t, node, "ip"); !strings.Contains(out, "10.96.0.10 . tcp . 80 . 0 comment \"ns/web:http\" : 10.244.9.9 . 8080") {
		t.Fatalf("the full sync did not repair the table:\n%s", out)
	}
}

// Cleanup of a node without svcnet's table succeeds: the errors of nft
// (through knftables) and of netlink are typed, and a missing table is
// recognised as such.
func TestNFTablesCleanupWithoutTable(t *testing.T) {
	ctx := context.Background()
	node := nftNode(t, "svcnet-nft-notable")
	nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := nftables.Cleanup(ctx, nft); err != nil {
		t.Fatalf("cleanup without a table: %v", err)
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); !knftables.IsNotFound(err) || !nftables.IsNotFound(err) {
		t.Fatalf("deleting a missing table: got %v, want knftables' not-found error", err)
	}
	if _, err := nft.ListAll(ctx); !knftables.IsNotFound(err) {
		t.Fatalf("listing a missing table: got %v, want knftables' not-found error", err)
	}
	// The same through the backend: its full sync over a missing table
	// starts it afresh, and its cleanup twice over is no error.
	b := nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.1.1"))
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := b.Cleanup(ctx); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
	}
	if names, err := nftables.Tables(corev1.IPv4Protocol, node); err != nil || len(names) != 0 {
		t.Fatalf("tables after cleanup: %v, %v", names, err)
	}
}
