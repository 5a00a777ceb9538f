// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// breakNext adds a rule the kernel refuses to the next transaction.
type breakNext struct {
	knftables.Interface
	broken bool
}

func (b *breakNext) Run(ctx context.Context, tx *knftables.Transaction) error {
	if b.broken {
		b.broken = false
		tx.Add(&knftables.Rule{Chain: "services", Rule: "jump no-such-chain"})
	}
	return b.Interface.Run(ctx, tx)
}

func webPorts(endpoint string) []*model.ServicePort {
	return []*model.ServicePort{{
		Name: "ns/web:http", Namespace: "ns", Service: "web", Protocol: corev1.ProtocolTCP,
		ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, HasEndpoints: true,
		ClusterEndpoints: []model.Endpoint{{IP: netip.MustParseAddr(endpoint), Port: 8080}},
	}}
}

func nftNode(t *testing.T, name string) string {
	t.Helper()
	requireKernel(t)
	node := netlab.Path(name)
	if err := netns.Create(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(node) })
	return node
}

// A transaction nft refuses leaves the table as it was, and the next sync
// (the agent's retry) is full and applies the new state.
func TestNFTablesFailedTransactionKeepsTableAndRecovers(t *testing.T) {
	ctx := context.Background()
	node := nftNode(t, "svcnet-nft-fail")
	nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, node)
	if err != nil {
		t.Fatal(err)
	}
	broken := &breakNext{Interface: nft}
	b := nftables.NewBackend(corev1.IPv4Protocol, broken, nftables.Config{})
	table := func() string {
		t.Helper()
		out, err := netlabRun(node, "nft", "list", "table", "ip", nftables.TableName)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.1.1"))
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.9.9"))
	broken.broken = true
	if _, err := b.Sync(ctx, dataplane.Node{}); err == nil {
		t.Fatal("the broken transaction succeeded")
	}
	if rules := table(); !strings.Contains(rules, "10.244.1.1 . 8080") || strings.Contains(rules, "10.244.9.9") {
		t.Fatalf("after the failed transaction the node must keep its table; it holds:\n%s", rules)
	}
	res, err := b.Sync(ctx, dataplane.Node{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full {
		t.Error("the sync after a failure must be full")
	}
	if rules := table(); !strings.Contains(rules, "10.244.9.9 . 8080") || strings.Contains(rules, "10.244.1.1") {
		t.Fatalf("the next sync must apply the new state; the table holds:\n%s", rules)
	}
}

// `svcnet agent --cleanup --mode=nftables` removes svcnet's table and
// nothing else.
func TestNFTablesAgentCleanup(t *testing.T) {
	ctx := context.Background()
	node := nftNode(t, "svcnet-nft-cleanup")
	if _, err := netlabRun(node, "nft", "add table ip other; add chain ip other c { type filter hook input priority 0 ; }"); err != nil {
		t.Fatal(err)
	}
	nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, node)
	if err != nil {
		t.Fatal(err)
	}
	b := nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.1.1"))
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	// A restarted agent's first (full) sync works over the table it finds.
	again := nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{})
	again.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, webPorts("10.244.1.2"))
	if _, err := again.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatalf("a full sync over an existing table: %v", err)
	}
	opts := agent.DefaultOptions()
	opts.NetNS, opts.NodeName, opts.Mode = node, "node-1", agent.ModeNFTables
	opts.Conntrack.MaxPerCore = 0 // nf_conntrack_max is the host's
	cfg, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Cleanup(ctx, cfg, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	out, err := netlabRun(node, "nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "svcnet") || !strings.Contains(out, "table ip other") {
		t.Errorf("after cleanup the ruleset must hold the other table only:\n%s", out)
	}
}

// netlabRun runs a command in the network namespace at path.
func netlabRun(path string, argv ...string) (string, error) {
	var out strings.Builder
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := netns.Run(path, cmd)
	return out.String(), err
}

// Tables lists a family's tables in the node's namespace only, which is
// what decides whether an agent in iptables mode has nftables tables to
// remove.
func TestNFTablesTablesOfANode(t *testing.T) {
	node := nftNode(t, "svcnet-nft-tables")
	empty, err := nftables.Tables(corev1.IPv4Protocol, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(empty) != 0 {
		t.Errorf("a new namespace has no tables, got %v", empty)
	}
	if _, err := netlabRun(node, "nft", "add table ip svcnet; add table ip other; add table ip6 kube-proxy"); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[corev1.IPFamily][]string{
		corev1.IPv4Protocol: {"other", "svcnet"},
		corev1.IPv6Protocol: {"kube-proxy"},
	} {
		got, err := nftables.Tables(f, node)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s tables: got %v, want %v", f, got, want)
		}
	}
}
