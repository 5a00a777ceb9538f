// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package quarantine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestList(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := New[int](3)
	l.Push(1, "ns/a", t0)
	l.Push(2, "ns/b", t0.Add(time.Second))
	l.Push(3, "ns/a", t0.Add(2*time.Second))
	if diff := cmp.Diff([]int{1, 3}, l.Owned("ns/a")); diff != "" {
		t.Fatalf("Owned (-want +got):\n%s", diff)
	}
	any := func(int) bool { return true }
	if v, ok := l.Oldest(t0.Add(time.Second), func(v int) bool { return v != 1 }); !ok || v != 2 {
		t.Fatalf("Oldest with a filter = %d, %v", v, ok)
	}
	if _, ok := l.Oldest(t0.Add(-time.Second), any); ok {
		t.Fatal("Oldest returned an entry released after the bound")
	}
	if dropped := l.Push(4, "ns/c", t0.Add(3*time.Second)); !cmp.Equal(dropped, []int{1}) {
		t.Fatalf("over the limit dropped %v, want the oldest", dropped)
	}
	if !l.Remove(3) || l.Remove(3) || l.Has(3) {
		t.Fatal("Remove is not idempotent")
	}
	if l.Owned("ns/a") != nil {
		t.Fatalf("owner still listed: %v", l.Owned("ns/a"))
	}
	if v, _ := l.Oldest(time.Time{}, any); v != 2 || l.Len() != 2 {
		t.Fatalf("Oldest = %d, Len = %d", v, l.Len())
	}
}
