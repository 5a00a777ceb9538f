// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package slicetracker

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func sliceGen(uid string, gen int64) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-" + uid, UID: types.UID(uid), Generation: gen}}
}

func sliceRV(uid string, gen int64, rv string) *discoveryv1.EndpointSlice {
	s := sliceGen(uid, gen)
	s.ResourceVersion = rv
	return s
}

var web = types.NamespacedName{Namespace: "ns", Name: "web"}

func TestStaleness(t *testing.T) {
	cases := map[string]struct {
		wrote   []*discoveryv1.EndpointSlice
		deleted []*discoveryv1.EndpointSlice
		// observed are deletions the informer delivered.
		observed []*discoveryv1.EndpointSlice
		cached   []*discoveryv1.EndpointSlice
		want     bool
	}{
		"nothing written":             {cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: false},
		"cache has the write":         {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, want: false},
		"cache is ahead":              {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 3)}, want: false},
		"cache misses an update":      {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: true},
		"cache misses a create":       {wrote: []*discoveryv1.EndpointSlice{sliceGen("b", 1)}, want: true},
		"cache still has a deletion":  {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, deleted: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: true},
		"cache has seen the deletion": {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, deleted: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: false},
		// Issue 35: a slice someone else deleted is not a create the cache
		// has yet to show.
		"someone else deleted a written slice": {
			wrote:    []*discoveryv1.EndpointSlice{sliceGen("a", 1), sliceGen("b", 1)},
			observed: []*discoveryv1.EndpointSlice{sliceGen("a", 1)},
			cached:   []*discoveryv1.EndpointSlice{sliceGen("b", 1)},
			want:     false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := New(ownsTest)
			for _, s := range tc.wrote {
				tr.Record(web, s)
			}
			for _, s := range tc.deleted {
				tr.RecordDeleted(web, s)
			}
			for _, s := range tc.observed {
				tr.ObservedDeletion(web, s)
			}
			if got := tr.Stale(web, tc.cached); got != tc.want {
				t.Errorf("stale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestObservedDeletion(t *testing.T) {
	cases := map[string]struct {
		setup                   func(tr *Tracker)
		wantTracked, wantExpect bool
	}{
		"never written":          {setup: func(*Tracker) {}},
		"written, deleted by us": {setup: func(tr *Tracker) { tr.Record(web, sliceGen("a", 1)); tr.RecordDeleted(web, sliceGen("a", 1)) }, wantTracked: true, wantExpect: true},
		"written, deleted by someone else": {
			setup:       func(tr *Tracker) { tr.Record(web, sliceGen("a", 1)) },
			wantTracked: true,
		},
		// The event of our own delete may arrive before Delete returns.
		"our delete still in flight": {
			setup:       func(tr *Tracker) { tr.Record(web, sliceGen("a", 1)); tr.Expect(sliceGen("a", 1)) },
			wantTracked: true, wantExpect: true,
		},
		"delete of a slice we adopted, in flight": {
			setup:       func(tr *Tracker) { tr.Expect(sliceGen("a", 1)) },
			wantTracked: true, wantExpect: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := New(ownsTest)
			tc.setup(tr)
			tracked, expected := tr.ObservedDeletion(web, sliceGen("a", 1))
			if tracked != tc.wantTracked || expected != tc.wantExpect {
				t.Errorf("ObservedDeletion = %v, %v; want %v, %v", tracked, expected, tc.wantTracked, tc.wantExpect)
			}
			if tr.Stale(web, nil) {
				t.Error("the Service still waits for a slice that is gone")
			}
		})
	}
}

func TestMissingConfirmsOnlyOldWrites(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	tr := New(ownsTest, WithClock(clk))
	tr.Record(web, sliceGen("a", 1))
	if got := tr.Missing(web, nil, time.Second); len(got) != 0 {
		t.Errorf("a write of just now is not missing yet, got %v", got)
	}
	clk.SetTime(clk.Now().Add(2 * time.Second))
	tr.Record(web, sliceGen("b", 1))
	want := []Ref{{Name: "web-a", UID: "a"}}
	if diff := cmp.Diff(want, tr.Missing(web, []*discoveryv1.EndpointSlice{sliceGen("c", 1)}, time.Second)); diff != "" {
		t.Errorf("Missing (-want +got):\n%s", diff)
	}
	tr.Drop(web, "a")
	if !tr.Stale(web, nil) {
		t.Error("the new write b must still hold the Service")
	}
	if tr.Stale(web, []*discoveryv1.EndpointSlice{sliceGen("b", 1)}) {
		t.Error("after Drop, the Service must not wait for a")
	}
}

func TestOwnWrite(t *testing.T) {
	tr := New(ownsTest)
	tr.Record(web, sliceRV("a", 2, "20"))
	cases := map[string]struct {
		event *discoveryv1.EndpointSlice
		want  bool
	}{
		"our write":                 {event: sliceRV("a", 2, "20"), want: true},
		"an older version":          {event: sliceRV("a", 1, "10"), want: true},
		"someone else's edit":       {event: sliceRV("a", 3, "30"), want: false},
		"a label edit, same gen":    {event: sliceRV("a", 2, "30"), want: false},
		"an unknown slice":          {event: sliceRV("z", 1, "5"), want: false},
		"garbled resourceVersion":   {event: sliceRV("a", 3, "x"), want: false},
		"garbled, older generation": {event: sliceRV("a", 2, "x"), want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tr.OwnWrite(web, tc.event); got != tc.want {
				t.Errorf("OwnWrite = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("in flight", func(t *testing.T) {
		tr.Expect(sliceRV("a", 2, "20"))
		defer tr.Abort(sliceRV("a", 2, "20"))
		if !tr.OwnWrite(web, sliceRV("a", 3, "30")) {
			t.Error("the event of an update still in flight is ours")
		}
	})
	t.Run("while the Service waits for its cache", func(t *testing.T) {
		tr.Stale(web, nil)
		if !tr.Waiting(web) || !tr.OwnWrite(web, sliceRV("a", 2, "20")) {
			t.Error("while the Service waits for its cache, its own write is still its own, and it waits")
		}
	})
}
