package slicetracker

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func sliceGen(uid string, gen int64) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Generation: gen}}
}

func TestStaleness(t *testing.T) {
	svc := types.NamespacedName{Namespace: "ns", Name: "web"}
	cases := map[string]struct {
		wrote   []*discoveryv1.EndpointSlice
		deleted []*discoveryv1.EndpointSlice
		cached  []*discoveryv1.EndpointSlice
		want    bool
	}{
		"nothing written":             {cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: false},
		"cache has the write":         {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, want: false},
		"cache is ahead":              {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 3)}, want: false},
		"cache misses an update":      {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 2)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: true},
		"cache misses a create":       {wrote: []*discoveryv1.EndpointSlice{sliceGen("b", 1)}, want: true},
		"cache still has a deletion":  {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, deleted: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, cached: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: true},
		"cache has seen the deletion": {wrote: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, deleted: []*discoveryv1.EndpointSlice{sliceGen("a", 1)}, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := New()
			for _, s := range tc.wrote {
				tr.Record(svc, s)
			}
			for _, s := range tc.deleted {
				tr.RecordDeleted(svc, s)
			}
			if got := tr.Stale(svc, tc.cached); got != tc.want {
				t.Errorf("stale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFiltersOwnWrites(t *testing.T) {
	svc := types.NamespacedName{Namespace: "ns", Name: "web"}
	tr := New()
	tr.Record(svc, sliceGen("a", 2))
	if !tr.OwnWrite(svc, sliceGen("a", 2), false) {
		t.Error("the event of our own write should not trigger a sync")
	}
	if tr.OwnWrite(svc, sliceGen("a", 3), false) {
		t.Error("a newer generation is someone else's write and must trigger a sync")
	}
	if tr.OwnWrite(svc, sliceGen("z", 1), false) {
		t.Error("an unknown slice must trigger a sync")
	}
	// While a sync waits for the cache, every event of the Service counts.
	tr.Stale(svc, nil)
	if tr.OwnWrite(svc, sliceGen("a", 2), false) {
		t.Error("events must trigger a sync while the Service waits for its cache")
	}
}
