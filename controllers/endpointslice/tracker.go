package endpointslice

import (
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// deletedGeneration marks a slice this controller deleted.
const deletedGeneration int64 = -1

// sliceTracker remembers the generation of every slice this controller
// wrote, per Service, so that a sync never acts on a cache that has not yet
// seen the controller's own last writes (which would create duplicates or
// undo an update), and so that the slice events of its own writes do not
// trigger another sync.
type sliceTracker struct {
	mu      sync.Mutex
	bySvc   map[types.NamespacedName]map[types.UID]int64
	waiting map[types.NamespacedName]bool
}

func newSliceTracker() *sliceTracker {
	return &sliceTracker{
		bySvc:   map[types.NamespacedName]map[types.UID]int64{},
		waiting: map[types.NamespacedName]bool{},
	}
}

func (t *sliceTracker) record(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gens := t.bySvc[svc]
	if gens == nil {
		gens = map[types.UID]int64{}
		t.bySvc[svc] = gens
	}
	gens[s.UID] = s.Generation
}

func (t *sliceTracker) recordDeleted(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gens := t.bySvc[svc]; gens != nil {
		gens[s.UID] = deletedGeneration
	}
}

// stale reports whether the cached slices of a Service miss one of this
// controller's writes. It also forgets deletions the cache has caught up with.
func (t *sliceTracker) stale(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) bool {
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

// ownWrite reports whether a slice event only shows this controller's own
// write, so that it need not trigger a sync. While a Service waits for its
// cache to catch up, every event of its slices counts.
func (t *sliceTracker) ownWrite(svc types.NamespacedName, s *discoveryv1.EndpointSlice, deleted bool) bool {
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

func (t *sliceTracker) forget(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.bySvc, svc)
	delete(t.waiting, svc)
}

// pendingChange is the oldest change of a Service's inputs that no slice
// write has reflected yet.
type pendingChange struct {
	// trigger is the change's own time, for the
	// endpoints.kubernetes.io/last-change-trigger-time annotation.
	trigger time.Time
	// observed is when this controller saw it, for the latency histogram.
	observed time.Time
}

// changeTracker collects pendingChanges per Service between syncs.
type changeTracker struct {
	mu      sync.Mutex
	pending map[types.NamespacedName]pendingChange
}

func newChangeTracker() *changeTracker {
	return &changeTracker{pending: map[types.NamespacedName]pendingChange{}}
}

func (c *changeTracker) observe(svc types.NamespacedName, trigger, observed time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[svc]
	if !ok {
		c.pending[svc] = pendingChange{trigger: trigger, observed: observed}
		return
	}
	if trigger.Before(p.trigger) {
		p.trigger = trigger
	}
	if observed.Before(p.observed) {
		p.observed = observed
	}
	c.pending[svc] = p
}

// take returns and clears the pending change of a Service.
func (c *changeTracker) take(svc types.NamespacedName) (pendingChange, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[svc]
	delete(c.pending, svc)
	return p, ok
}

// restore puts back a change that a failed sync did not write.
func (c *changeTracker) restore(svc types.NamespacedName, p pendingChange) {
	c.observe(svc, p.trigger, p.observed)
}
