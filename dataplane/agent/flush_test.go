// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"strings"
	"testing"
)

// TestFlushedRulesComeBackAtOnce flushes the nat table behind the agent's
// back and checks that the canary check makes the next sync full, which
// puts the Service's rules back, and asks for it at once.
func TestFlushedRulesComeBackAtOnce(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient()
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.1.2")))
	a, fk := testAgent(t, c)
	a.checkFlushed(ctx) // before the first sync: nothing to check yet
	select {
	case <-a.trigger:
		t.Fatal("a check before the first sync asked for a sync")
	default:
	}
	must(t, a.SyncOnce(ctx))
	fk.Flush("nat")
	must(t, a.SyncOnce(ctx))
	if strings.Contains(fk.Dump(), "10.96.0.10") {
		t.Fatal("a partial sync rewrote the flushed rules: the test cannot tell the canary's work")
	}
	a.checkFlushed(ctx)
	select {
	case <-a.trigger:
	default:
		t.Fatal("the flush did not ask for a sync")
	}
	must(t, a.SyncOnce(ctx))
	if !strings.Contains(fk.Dump(), "-d 10.96.0.10") {
		t.Fatalf("after the flush and the next sync, the Service's rules are missing:\n%s", fk.Dump())
	}
}
