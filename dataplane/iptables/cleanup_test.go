// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCleanupRemovesOnlyWhatItOwns programs a ruleset beside another
// program's chain and rules, cleans up, and expects exactly the other
// program's state back.
func TestCleanupRemovesOnlyWhatItOwns(t *testing.T) {
	ctx := context.Background()
	fake := NewFake()
	foreign := "*filter\n:OTHER-CHAIN - [0:0]\n-A OTHER-CHAIN -j ACCEPT\n-A INPUT -j OTHER-CHAIN\n-A FORWARD -s 192.0.2.0/24 -j DROP\nCOMMIT\n" +
		"*nat\n:OTHER-NAT - [0:0]\n-A OUTPUT -j OTHER-NAT\nCOMMIT\n"
	if err := fake.Restore(ctx, []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	before := fake.Dump()
	if _, err := NewSyncer(fake).Sync(ctx, rulesetFor(ready("10.244.1.2", node), ready("10.244.2.2", "node-b"))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fake.Dump(), "KUBE-SEP-") {
		t.Fatal("the ruleset was not programmed")
	}

	if err := Cleanup(ctx, fake); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, fake.Dump()); diff != "" {
		t.Errorf("after cleanup (-before +after):\n%s", diff)
	}
	restores := fake.Restores
	if err := Cleanup(ctx, fake); err != nil {
		t.Fatal(err)
	}
	if fake.Restores != restores {
		t.Error("a cleanup with nothing to remove ran a restore")
	}
}
