// Package slicetracker protects an EndpointSlice-writing controller from its
// own stale cache: it remembers the generation of every slice the controller
// wrote, so that a sync waits until the informer shows them instead of
// creating duplicates or undoing an update, and so that the events of its
// own writes trigger no sync. The EndpointSlice and EndpointSlice mirroring
// controllers share it.
package slicetracker

import (
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deletedGeneration marks a slice the controller deleted.
const deletedGeneration int64 = -1

// Tracker remembers the generation of every slice a controller wrote,
// per Service, so that a sync never acts on a cache that has not yet
// seen the controller's own last writes (which would create duplicates or
// undo an update), and so that the slice events of its own writes do not
// trigger another sync.
type Tracker struct {
	mu      sync.Mutex
	bySvc   map[types.NamespacedName]map[types.UID]int64
	waiting map[types.NamespacedName]bool
}

// New returns an empty Tracker.
func New() *Tracker {
	return &Tracker{
		bySvc:   map[types.NamespacedName]map[types.UID]int64{},
		waiting: map[types.NamespacedName]bool{},
	}
}

// Record notes a slice the controller created or updated.
func (t *Tracker) Record(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gens := t.bySvc[svc]
	if gens == nil {
		gens = map[types.UID]int64{}
		t.bySvc[svc] = gens
	}
	gens[s.UID] = s.Generation
}

// RecordDeleted notes a slice the controller deleted.
func (t *Tracker) RecordDeleted(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gens := t.bySvc[svc]; gens != nil {
		gens[s.UID] = deletedGeneration
	}
}

// Stale reports whether the cached slices of a Service miss one of this
// controller's writes. It also forgets deletions the cache has caught up with.
func (t *Tracker) Stale(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gens := t.bySvc[svc]
	present := make(map[types.UID]int64, len(cached))
	for _, s := range cached {
		present[s.UID] = s.Generation
	}
	stale := false
	for uid, want := range gens {
		got, ok := present[uid]
		switch {
		case want == deletedGeneration && !ok:
			delete(gens, uid)
		case want == deletedGeneration, !ok, got < want:
			stale = true
		}
	}
	t.waiting[svc] = stale
	return stale
}

// OwnWrite reports whether a slice event only shows the controller's own
// write, so that it need not trigger a sync. While a Service waits for its
// cache to catch up, every event of its slices counts.
func (t *Tracker) OwnWrite(svc types.NamespacedName, s *discoveryv1.EndpointSlice, deleted bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiting[svc] {
		return false
	}
	want, ok := t.bySvc[svc][s.UID]
	if !ok {
		return false
	}
	if deleted {
		return want == deletedGeneration
	}
	return want != deletedGeneration && s.Generation <= want
}

// Forget drops what is known of a Service that is gone.
func (t *Tracker) Forget(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.bySvc, svc)
	delete(t.waiting, svc)
}
