// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

func rulesetFor(eps ...ep) *Ruleset {
	m := model.Build(corev1.IPv4Protocol, model.Node{Name: node}, []*corev1.Service{web(nil)},
		map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "ns", Name: "web"}: {slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, eps...)}}, model.Options{})
	return Render(m, Config{})
}

func countLines(dump, substr string) int {
	n := 0
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

func TestSyncerFullThenPartial(t *testing.T) {
	ctx := context.Background()
	fake := NewFake()
	s := NewSyncer(fake)

	res, err := s.Sync(ctx, rulesetFor(ready("10.244.1.2", node), ready("10.244.2.2", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full {
		t.Errorf("first sync was not full: %+v", res)
	}
	dump := fake.Dump()
	for _, j := range jumpRules {
		if countLines(dump, "-A "+j.chain+" "+j.text()) != 1 {
			t.Errorf("jump %q missing or duplicated in:\n%s", j.text(), dump)
		}
	}
	oldSEP := sepChain("ns/web:http", corev1.ProtocolTCP, "10.244.2.2:8080")
	if !strings.Contains(dump, ":"+oldSEP) {
		t.Fatalf("no %s after the first sync", oldSEP)
	}

	// One endpoint replaced: only the service chain and the new endpoint
	// chain are written, the old endpoint chain is deleted.
	res, err = s.Sync(ctx, rulesetFor(ready("10.244.1.2", node), ready("10.244.3.3", "node-b")))
	if err != nil {
		t.Fatal(err)
	}
	if res.Full || res.Chains != 2 || res.Deleted != 1 {
		t.Errorf("partial sync wrote %+v, want 2 chains and 1 deletion", res)
	}
	if strings.Contains(string(fake.LastRestore), ":"+ChainServices) {
		t.Errorf("partial sync rewrote KUBE-SERVICES although it did not change:\n%s", fake.LastRestore)
	}
	dump = fake.Dump()
	if strings.Contains(dump, oldSEP) {
		t.Errorf("stale chain %s still present", oldSEP)
	}
	if countLines(dump, "10.244.3.3:8080") != 2 {
		t.Errorf("new endpoint not programmed:\n%s", dump)
	}

	// Nothing changed: no restore at all.
	before := fake.Restores
	if _, err := s.Sync(ctx, rulesetFor(ready("10.244.1.2", node), ready("10.244.3.3", "node-b"))); err != nil {
		t.Fatal(err)
	}
	if fake.Restores != before {
		t.Errorf("an unchanged ruleset caused a restore")
	}
}

func TestSyncerFailureKeepsRulesAndResyncsFully(t *testing.T) {
	ctx := context.Background()
	fake := NewFake()
	s := NewSyncer(fake)
	if _, err := s.Sync(ctx, rulesetFor(ready("10.244.1.2", node))); err != nil {
		t.Fatal(err)
	}
	good := fake.Dump()

	fake.FailNext = errors.New("iptables-restore: resource busy")
	if _, err := s.Sync(ctx, rulesetFor(ready("10.244.9.9", node))); err == nil {
		t.Fatal("want the failed restore reported")
	}
	if fake.Dump() != good {
		t.Errorf("a failed sync changed the rules")
	}
	res, err := s.Sync(ctx, rulesetFor(ready("10.244.9.9", node)))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full {
		t.Errorf("the sync after a failure was not full: %+v", res)
	}
	if !strings.Contains(fake.Dump(), "10.244.9.9:8080") || strings.Contains(fake.Dump(), "10.244.1.2:8080") {
		t.Errorf("rules after recovery:\n%s", fake.Dump())
	}
}

func TestSyncerRestartKeepsServingAndCleansUp(t *testing.T) {
	ctx := context.Background()
	fake := NewFake()
	// A previous agent left rules, including a service that no longer exists.
	prev := NewSyncer(fake)
	if _, err := prev.Sync(ctx, rulesetFor(ready("10.244.1.2", node), ready("10.244.7.7", "node-b"))); err != nil {
		t.Fatal(err)
	}
	gone := sepChain("ns/web:http", corev1.ProtocolTCP, "10.244.7.7:8080")

	s := NewSyncer(fake)
	res, err := s.Sync(ctx, rulesetFor(ready("10.244.1.2", node)))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full || res.Deleted != 1 {
		t.Errorf("restart sync %+v, want full with 1 stale chain deleted", res)
	}
	dump := fake.Dump()
	if strings.Contains(dump, gone) {
		t.Errorf("stale %s kept after restart", gone)
	}
	for _, j := range jumpRules {
		if n := countLines(dump, "-A "+j.chain+" "+j.text()); n != 1 {
			t.Errorf("jump %q present %d times after restart, want 1", j.text(), n)
		}
	}
	// The restart restore never declared (flushed) a chain without refilling
	// it in the same transaction: the service chain is in the restore input.
	if !strings.Contains(string(fake.LastRestore), "-A "+svcChain("ns/web:http", corev1.ProtocolTCP)) {
		t.Errorf("restart restore does not refill the service chain:\n%s", fake.LastRestore)
	}
}
