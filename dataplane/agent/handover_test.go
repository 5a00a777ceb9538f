// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/go-logr/logr"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
)

// TestHandover walks one node through a migration from kube-proxy and
// back: labelled for kube-proxy the agent writes nothing and stays
// healthy; unlabelled it writes every rule at once and removes
// kube-proxy's leftovers only once kube-proxy has left the node (its
// health address free), once; labelled again it stops writing.
func TestHandover(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{LabelNodeProxy: NodeProxyKubeProxy}}}
	must(t, c.Create(ctx, node))
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.0.5")))
	a, fk := testAgent(t, c)
	removed := 0
	a.removeLeftovers = func(context.Context) { removed++ }
	serves := func() bool { return strings.Contains(fk.Dump(), "-d 10.96.0.10 ") }

	must(t, a.SyncOnce(ctx))
	if serves() {
		t.Fatalf("standing by for kube-proxy, the agent wrote rules:\n%s", fk.Dump())
	}
	if h := a.Health(); !h.Healthy {
		t.Errorf("standing by, the agent is unhealthy: %+v", h)
	}

	node.Labels[LabelNodeProxy] = "svcnet"
	must(t, c.Update(ctx, node))
	must(t, a.SyncOnce(ctx))
	if !serves() {
		t.Fatalf("the node is the agent's, yet its Service has no rules:\n%s", fk.Dump())
	}
	if removed != 0 {
		t.Fatal("kube-proxy's rules were removed while it still held its health address")
	}
	a.healthListening.Store(true) // kube-proxy has left the node
	must(t, a.SyncOnce(ctx))
	must(t, a.SyncOnce(ctx))
	if removed != 1 {
		t.Fatalf("kube-proxy's leftovers removed %d times after it left, want once", removed)
	}

	// Handed back: the agent stops writing. Its iptables chains are
	// kube-proxy's, left for kube-proxy to rewrite.
	node.Labels[LabelNodeProxy] = NodeProxyKubeProxy
	must(t, c.Update(ctx, node))
	must(t, a.SyncOnce(ctx))
	fk.Flush("nat") // kube-proxy rewrites its chains
	fk.Flush("filter")
	must(t, a.SyncOnce(ctx))
	if serves() {
		t.Fatalf("handed back to kube-proxy, the agent wrote rules again:\n%s", fk.Dump())
	}
	// And taken over again: the first sync rewrites everything, although
	// no Service changed, since kube-proxy changed the kernel meanwhile.
	delete(node.Labels, LabelNodeProxy)
	must(t, c.Update(ctx, node))
	must(t, a.SyncOnce(ctx))
	if !serves() {
		t.Fatalf("taken over again, the agent did not rewrite its rules:\n%s", fk.Dump())
	}
	if removed != 2 {
		t.Fatalf("kube-proxy's leftovers removed %d times in all, want twice (once per takeover)", removed)
	}
}

// TestHandoverSharedNodeKeepsKubeProxysRules: with --proxy-name the node
// is shared with a kube-proxy that keeps running, so nothing of its rules
// is ever removed.
func TestHandoverSharedNodeKeepsKubeProxysRules(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	cfg := testConfig(t, "--proxy-mode=nftables", "--proxy-name=svcnet")
	fk := iptables.NewFake()
	a := newAgent(c, cfg, logr.Discard(), clock.RealClock{}, []dataplane.Backend{iptables.NewBackend(corev1.IPv4Protocol, fk, iptables.Config{})})
	removed := 0
	a.removeLeftovers = func(context.Context) { removed++ }
	a.healthListening.Store(true)
	must(t, a.SyncOnce(ctx))
	if removed != 0 {
		t.Fatal("sharing the node (--proxy-name), the agent removed kube-proxy's rules")
	}
}
