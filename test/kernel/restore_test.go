// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// corruptNext makes the next restore fail inside iptables-restore itself:
// a rule for a chain that does not exist goes into the nat table's
// transaction, which the kernel then refuses as a whole.
type corruptNext struct {
	iptables.Interface
	corrupt bool
}

func (c *corruptNext) Restore(ctx context.Context, data []byte) error {
	if c.corrupt {
		c.corrupt = false
		i := bytes.LastIndex(data, []byte("COMMIT\n"))
		data = append(append(bytes.Clone(data[:i]), []byte("-A KUBE-NO-SUCH-CHAIN -j ACCEPT\n")...), data[i:]...)
	}
	return c.Interface.Restore(ctx, data)
}

// A restore that iptables refuses leaves the node with the rules it had,
// and the next sync (the agent's retry) applies the new ones in full.
func TestFailedRestoreKeepsRulesAndRecovers(t *testing.T) {
	requireKernel(t)
	ctx := context.Background()
	node := netlab.Path("svcnet-restore-node")
	if err := netns.Create(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(node) })
	exec := iptables.NewExec(corev1.IPv4Protocol, node)
	ipt := &corruptNext{Interface: exec}
	b := iptables.NewBackend(corev1.IPv4Protocol, ipt, iptables.Config{})
	web := func(endpoint string) []*model.ServicePort {
		return []*model.ServicePort{{
			Name: "ns/web:http", Namespace: "ns", Service: "web", Protocol: corev1.ProtocolTCP,
			ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, HasEndpoints: true,
			ClusterEndpoints: []model.Endpoint{{IP: netip.MustParseAddr(endpoint), Port: 8080}},
		}}
	}
	nat := func() string {
		t.Helper()
		save, err := exec.Save(ctx, "nat")
		if err != nil {
			t.Fatal(err)
		}
		return string(save)
	}

	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, web("10.244.1.1"))
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, web("10.244.9.9"))
	ipt.corrupt = true
	if _, err := b.Sync(ctx, dataplane.Node{}); err == nil || !strings.Contains(err.Error(), "iptables-restore") {
		t.Fatalf("the corrupted restore: got %v, want iptables-restore's error", err)
	}
	if rules := nat(); !strings.Contains(rules, "--to-destination 10.244.1.1:8080") || strings.Contains(rules, "10.244.9.9") {
		t.Fatalf("after the failed restore the node must keep its previous rules; nat table:\n%s", rules)
	}
	res, err := b.Sync(ctx, dataplane.Node{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full {
		t.Error("the sync after a failure must be full")
	}
	if rules := nat(); !strings.Contains(rules, "--to-destination 10.244.9.9:8080") || strings.Contains(rules, "10.244.1.1") {
		t.Fatalf("the next sync must apply the new rules and drop the old endpoint; nat table:\n%s", rules)
	}
}
