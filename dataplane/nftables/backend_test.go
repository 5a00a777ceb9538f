// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// failingFake is knftables' fake whose next Run fails when armed.
type failingFake struct {
	*knftables.Fake
	fail bool
	runs []string
}

func (f *failingFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.runs = append(f.runs, tx.String())
	if f.fail {
		f.fail = false
		return errors.New("injected failure")
	}
	return f.Fake.Run(ctx, tx)
}

func port(name string, clusterIP string, eps ...string) *model.ServicePort {
	p := &model.ServicePort{
		Name: "ns/" + name + ":http", Namespace: "ns", Service: name, Protocol: corev1.ProtocolTCP,
		ClusterIP: netip.MustParseAddr(clusterIP), Port: 80, HasEndpoints: len(eps) > 0,
	}
	for _, ip := range eps {
		p.ClusterEndpoints = append(p.ClusterEndpoints, model.Endpoint{IP: netip.MustParseAddr(ip), Port: 8080})
	}
	return p
}

// normalized is a dump with its lines sorted: partial syncs add elements
// in another order than a full one.
func normalized(dump string) string {
	lines := strings.Split(strings.TrimSpace(dump), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// fullDump is the table a fresh backend writes for the same Services.
func fullDump(t *testing.T, services map[types.NamespacedName][]*model.ServicePort, node dataplane.Node) string {
	t.Helper()
	fake := knftables.NewFake(knftables.IPv4Family, TableName)
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	for k, ports := range services {
		b.SetService(k, ports)
	}
	if _, err := b.Sync(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	return normalized(fake.Dump())
}

// TestPartialSyncsMatchFullSync applies a series of changes one partial
// sync at a time and checks, after each, that the table is what a full
// sync of the same Services writes, and that the sync touched only what
// changed.
func TestPartialSyncsMatchFullSync(t *testing.T) {
	ctx := context.Background()
	fake := &failingFake{Fake: knftables.NewFake(knftables.IPv4Family, TableName)}
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	services := map[types.NamespacedName][]*model.ServicePort{}
	affinity := func(p *model.ServicePort, seconds int32) *model.ServicePort { p.AffinitySeconds = seconds; return p }
	steps := []struct {
		name    string
		key     types.NamespacedName
		ports   []*model.ServicePort
		node    dataplane.Node
		touches []string // substrings the partial transaction must hold
	}{
		{name: "first service", key: types.NamespacedName{Namespace: "ns", Name: "a"}, ports: []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.1", "10.0.0.2")}},
		{name: "second service, same count", key: types.NamespacedName{Namespace: "ns", Name: "b"}, ports: []*model.ServicePort{port("b", "10.96.0.2", "10.0.1.1", "10.0.1.2")},
			touches: []string{`add element ip svcnet endpoints-tcp-2 { 10.96.0.2 . tcp . 80 . 0 comment "ns/b:http" : 10.0.1.1 . 8080 }`}},
		{name: "endpoint replaced", key: types.NamespacedName{Namespace: "ns", Name: "a"}, ports: []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.1", "10.0.0.3")},
			touches: []string{"delete element ip svcnet endpoints-tcp-2 { 10.96.0.1 . tcp . 80 . 1 }", `add element ip svcnet endpoints-tcp-2 { 10.96.0.1 . tcp . 80 . 1 comment "ns/a:http" : 10.0.0.3 . 8080 }`}},
		{name: "scaled to 3", key: types.NamespacedName{Namespace: "ns", Name: "a"}, ports: []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.1", "10.0.0.3", "10.0.0.4")},
			touches: []string{"add map ip svcnet endpoints-tcp-3", "numgen random mod 3 map @endpoints-tcp-3"}},
		{name: "no endpoints", key: types.NamespacedName{Namespace: "ns", Name: "b"}, ports: []*model.ServicePort{port("b", "10.96.0.2")},
			touches: []string{`add element ip svcnet no-endpoint-services { 10.96.0.2 . tcp . 80 comment "ns/b:http" }`, "delete map ip svcnet endpoints-tcp-2"}},
		{name: "affinity", key: types.NamespacedName{Namespace: "ns", Name: "a"}, ports: []*model.ServicePort{affinity(port("a", "10.96.0.1", "10.0.0.1", "10.0.0.3"), 60)},
			touches: []string{"goto service-"}},
		{name: "affinity timeout changed", key: types.NamespacedName{Namespace: "ns", Name: "a"}, ports: []*model.ServicePort{affinity(port("a", "10.96.0.1", "10.0.0.1", "10.0.0.3"), 120)},
			touches: []string{"timeout 120s"}},
		{name: "node port addresses", node: dataplane.Node{NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}},
			touches: []string{"add element ip svcnet nodeport-ips { 192.168.0.10 }"}},
		{name: "service deleted", key: types.NamespacedName{Namespace: "ns", Name: "a"}, node: dataplane.Node{NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}}},
	}
	for i, step := range steps {
		if step.key != (types.NamespacedName{}) {
			b.SetService(step.key, step.ports)
			if step.ports == nil {
				delete(services, step.key)
			} else {
				services[step.key] = step.ports
			}
		}
		res, err := b.Sync(ctx, step.node)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if res.Full != (i == 0) {
			t.Errorf("%s: Full = %v", step.name, res.Full)
		}
		tx := fake.runs[len(fake.runs)-1]
		for _, s := range step.touches {
			if !strings.Contains(tx, s) {
				t.Errorf("%s: transaction has no %q:\n%s", step.name, s, tx)
			}
		}
		if i > 0 && step.name != "node port addresses" && strings.Contains(tx, "flush chain ip svcnet services") {
			t.Errorf("%s: a partial sync rewrote the services chain:\n%s", step.name, tx)
		}
		if diff := cmp.Diff(fullDump(t, services, step.node), normalized(fake.Dump())); diff != "" {
			t.Fatalf("%s: table differs from a full sync (-full +partial):\n%s", step.name, diff)
		}
	}
}

func TestEndpointChangeWritesOnlyElements(t *testing.T) {
	ctx := context.Background()
	fake := &failingFake{Fake: knftables.NewFake(knftables.IPv4Family, TableName)}
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	for i := range 50 {
		b.SetService(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}, []*model.ServicePort{port(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", i+1), fmt.Sprintf("10.0.%d.1", i), fmt.Sprintf("10.0.%d.2", i))})
	}
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "s7"}, []*model.ServicePort{port("s7", "10.96.0.8", "10.0.7.1", "10.0.7.9")})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(fake.runs[len(fake.runs)-1]), "\n") {
		if !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
			t.Errorf("an endpoint change wrote more than elements: %s", line)
		}
	}
}

func TestFailedSyncIsRetriedInFull(t *testing.T) {
	ctx := context.Background()
	fake := &failingFake{Fake: knftables.NewFake(knftables.IPv4Family, TableName)}
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "a"}, []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.1")})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	before := fake.Dump()
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "a"}, []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.2")})
	fake.fail = true
	if _, err := b.Sync(ctx, dataplane.Node{}); err == nil {
		t.Fatal("sync did not fail")
	}
	if fake.Dump() != before {
		t.Error("a failed sync changed the table")
	}
	// Something else removes a chain meanwhile: the full resync restores it.
	tx := fake.NewTransaction()
	tx.Flush(&knftables.Chain{Name: chainServices})
	if err := fake.Fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	res, err := b.Sync(ctx, dataplane.Node{})
	if err != nil || !res.Full {
		t.Fatalf("sync after a failure: full=%v err=%v", res.Full, err)
	}
	want := fullDump(t, map[types.NamespacedName][]*model.ServicePort{{Namespace: "ns", Name: "a"}: {port("a", "10.96.0.1", "10.0.0.2")}}, dataplane.Node{})
	if diff := cmp.Diff(want, normalized(fake.Dump())); diff != "" {
		t.Errorf("table after the full resync (-want +got):\n%s", diff)
	}
}

func TestFullSyncRemovesWhatIsNotWanted(t *testing.T) {
	ctx := context.Background()
	fake := knftables.NewFake(knftables.IPv4Family, TableName)
	tx := fake.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "endpoint-old"})
	tx.Add(&knftables.Rule{Chain: "endpoint-old", Rule: "meta l4proto tcp dnat to 10.0.0.9:80"})
	tx.Add(&knftables.Set{Name: "endpoints-7", Type: "ipv4_addr"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, "endpoint-old") || strings.Contains(dump, "endpoints-7") {
		t.Errorf("stale objects survived a full sync:\n%s", dump)
	}
}

// TestFailedFullSyncRecreatesTheTable: when a full sync fails (the table
// holds something it cannot reconcile), the next one replaces the table in
// the same transaction.
func TestFailedFullSyncRecreatesTheTable(t *testing.T) {
	ctx := context.Background()
	fake := &failingFake{Fake: knftables.NewFake(knftables.IPv4Family, TableName), fail: true}
	b := NewBackend(corev1.IPv4Protocol, fake, Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "a"}, []*model.ServicePort{port("a", "10.96.0.1", "10.0.0.1")})
	if _, err := b.Sync(ctx, dataplane.Node{}); err == nil {
		t.Fatal("sync did not fail")
	}
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	if tx := fake.runs[len(fake.runs)-1]; !strings.Contains(tx, "delete table ip svcnet") {
		t.Errorf("the retried full sync did not replace the table:\n%s", tx)
	}
}
