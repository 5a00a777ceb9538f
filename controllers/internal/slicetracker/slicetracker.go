// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package slicetracker protects an EndpointSlice-writing controller from its
// own stale cache and tells its own writes from everyone else's. It
// remembers the generation and resourceVersion of every slice the
// controller wrote, so that a sync waits until the informer shows them
// instead of creating duplicates or undoing an update, and so that the
// events of its own writes trigger no sync.
//
// A slice the controller wrote that is missing from the cache is either not
// there yet (the cache is behind the create) or gone (someone else deleted
// it). The informer tells the two apart: a deletion it observes removes the
// slice from the tracker, as upstream's EndpointSliceTracker.HandleDeletion
// does, and so does an edit that moves the slice out of the controller's
// ownership (its managed-by or service-name label changed). For the rare
// slice whose deletion the informer never delivered (created and deleted
// between two watches), a sync confirms a slice missing for longer than a
// moment with a live read (Missing, Drop). The EndpointSlice and
// EndpointSlice mirroring controllers share the Tracker and its event
// Handler.
package slicetracker

import (
	"context"
	"fmt"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// ConfirmMissingAfter is how long a slice the controller wrote may be
// missing from the cache before a sync asks the API server whether it is
// gone (its deletion event lost between two watches).
const ConfirmMissingAfter = 2 * time.Second

// deletedGeneration marks a slice the controller deleted.
const deletedGeneration int64 = -1

// Tracker remembers the slices a controller wrote, per Service, and the
// changes other writers made to them until a sync repairs them.
type Tracker struct {
	owns    func(*discoveryv1.EndpointSlice) bool
	repairs *repairs.Pending[types.NamespacedName]
	clock   clock.PassiveClock
	mu      sync.Mutex
	bySvc   map[types.NamespacedName]map[types.UID]written
	waiting map[types.NamespacedName]bool
	// inFlight holds the slices being updated or deleted: the informer may
	// deliver the event of a write before the write returns.
	inFlight map[types.UID]bool
}

// written is what the controller last wrote of one slice.
type written struct {
	name            string
	generation      int64 // deletedGeneration once the controller deleted it
	resourceVersion string
	at              time.Time
}

// Option configures a Tracker.
type Option func(*Tracker)

// WithClock replaces the wall clock (tests).
func WithClock(c clock.PassiveClock) Option { return func(t *Tracker) { t.clock = c } }

// New returns an empty Tracker for a controller that owns the slices for
// which owns, which reads only their labels, is true.
func New(owns func(*discoveryv1.EndpointSlice) bool, opts ...Option) *Tracker {
	t := &Tracker{
		owns:     owns,
		repairs:  &repairs.Pending[types.NamespacedName]{},
		clock:    clock.RealClock{},
		bySvc:    map[types.NamespacedName]map[types.UID]written{},
		waiting:  map[types.NamespacedName]bool{},
		inFlight: map[types.UID]bool{},
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Expect notes that the controller is about to update or delete a slice,
// so that the event of that write, which may arrive before the write
// returns, is not taken for someone else's. Record, RecordDeleted or Abort
// follow.
func (t *Tracker) Expect(s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight[s.UID] = true
}

// Abort ends an expected write that failed.
func (t *Tracker) Abort(s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inFlight, s.UID)
}

// Record notes a slice the controller created or updated, as the API
// server returned it.
func (t *Tracker) Record(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inFlight, s.UID)
	gens := t.bySvc[svc]
	if gens == nil {
		gens = map[types.UID]written{}
		t.bySvc[svc] = gens
	}
	gens[s.UID] = written{name: s.Name, generation: s.Generation, resourceVersion: s.ResourceVersion, at: t.clock.Now()}
}

// RecordDeleted notes a slice the controller deleted.
func (t *Tracker) RecordDeleted(svc types.NamespacedName, s *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inFlight, s.UID)
	gens := t.bySvc[svc]
	if gens == nil {
		gens = map[types.UID]written{}
		t.bySvc[svc] = gens
	}
	gens[s.UID] = written{name: s.Name, generation: deletedGeneration, at: t.clock.Now()}
}

// Stale reports whether the cached slices of a Service miss one of this
// controller's writes: a slice it created that the cache does not show
// yet, an update the cache shows an older generation of, or a deletion the
// cache still shows. It also forgets deletions the cache has caught up
// with.
func (t *Tracker) Stale(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	gens := t.bySvc[svc]
	present := make(map[types.UID]int64, len(cached))
	for _, s := range cached {
		present[s.UID] = s.Generation
	}
	stale := false
	for uid, w := range gens {
		got, ok := present[uid]
		switch {
		case w.generation == deletedGeneration && !ok:
			delete(gens, uid)
		case w.generation == deletedGeneration, !ok, got < w.generation:
			stale = true
		}
	}
	t.waiting[svc] = stale
	return stale
}

// Ref names a slice.
type Ref struct {
	Name string
	UID  types.UID
}

// StaleConfirmed reports, as Stale, whether the cache misses one of the
// controller's writes to a Service's slices, after asking reader (past the
// cache) about the slices missing for longer than ConfirmMissingAfter: one
// that is gone, or no longer the controller's, stops holding the Service
// back and is noted as a repair.
func (t *Tracker) StaleConfirmed(ctx context.Context, reader client.Reader, svc types.NamespacedName, cached []*discoveryv1.EndpointSlice) (bool, error) {
	if !t.Stale(svc, cached) {
		return false, nil
	}
	missing := t.Missing(svc, cached, ConfirmMissingAfter)
	if len(missing) == 0 {
		return true, nil
	}
	for _, m := range missing {
		var live discoveryv1.EndpointSlice
		err := reader.Get(ctx, types.NamespacedName{Namespace: svc.Namespace, Name: m.Name}, &live)
		switch {
		case apierrors.IsNotFound(err):
			t.repairs.Note(svc, repairs.Change{Kind: Kind, Object: klog.KRef(svc.Namespace, m.Name), Reason: repairs.ReasonDeleted})
		case err != nil:
			return true, fmt.Errorf("confirming EndpointSlice %s/%s: %w", svc.Namespace, m.Name, err)
		case live.UID != m.UID:
			t.repairs.Note(svc, repairs.Change{Kind: Kind, Object: klog.KObj(&live), Reason: repairs.ReasonDeleted})
		case !t.owns(&live) || live.Labels[discoveryv1.LabelServiceName] != svc.Name:
			t.repairs.Note(svc, repairs.Change{Kind: Kind, Object: klog.KObj(&live), Reason: repairs.ReasonDisowned, By: repairs.LastManager(&live)})
		default:
			continue // there, and the controller's: the cache is late
		}
		t.Drop(svc, m.UID)
	}
	return t.Stale(svc, cached), nil
}

// Attribute names, for the changes noted for a Service's slices, the field
// manager that made them, read through reader (past the cache, which keeps
// no managedFields) before the sync writes the repair.
func (t *Tracker) Attribute(ctx context.Context, reader client.Reader, svc types.NamespacedName) {
	t.repairs.Each(svc, func(c *repairs.Change) {
		if c.By == "" && c.Reason != repairs.ReasonDeleted {
			c.By = repairs.LastManagerOf(ctx, reader, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: c.Object.Namespace, Name: c.Object.Name}})
		}
	})
}

// Repaired takes the changes other writers made to a Service's slices:
// the caller reports them when its sync wrote something, and drops them
// otherwise (nothing needed repair, or the Service is gone).
func (t *Tracker) Repaired(svc types.NamespacedName) []repairs.Change {
	return t.repairs.Take(svc)
}

// Handler returns the controller's EndpointSlice event handler.
func (t *Tracker) Handler() *Handler { return &Handler{tracker: t} }

// Missing returns the slices of a Service that the controller created or
// updated more than olderThan ago and that the cache does not show: gone
// unnoticed, or owned by someone else now, unless the cache is unusually
// late. The caller confirms each with a live read and Drops those that are
// not the controller's any more.
func (t *Tracker) Missing(svc types.NamespacedName, cached []*discoveryv1.EndpointSlice, olderThan time.Duration) []Ref {
	t.mu.Lock()
	defer t.mu.Unlock()
	present := make(map[types.UID]bool, len(cached))
	for _, s := range cached {
		present[s.UID] = true
	}
	var out []Ref
	for uid, w := range t.bySvc[svc] {
		if w.generation != deletedGeneration && !present[uid] && t.clock.Since(w.at) >= olderThan {
			out = append(out, Ref{Name: w.name, UID: uid})
		}
	}
	return out
}

// Drop forgets one slice of a Service: it is gone, or no longer this
// controller's.
func (t *Tracker) Drop(svc types.NamespacedName, uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.bySvc[svc], uid)
}

// ObservedDeletion handles the informer's deletion of a slice of svc: the
// slice is forgotten, and the result tells whether this controller wrote
// it (tracked) and whether it expected the deletion (its own).
func (t *Tracker) ObservedDeletion(svc types.NamespacedName, s *discoveryv1.EndpointSlice) (tracked, expected bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.bySvc[svc][s.UID]
	if !ok {
		return t.inFlight[s.UID], t.inFlight[s.UID]
	}
	delete(t.bySvc[svc], s.UID)
	return true, w.generation == deletedGeneration || t.inFlight[s.UID]
}

// Tracked reports whether the controller wrote the slice (and did not
// delete it).
func (t *Tracker) Tracked(svc types.NamespacedName, s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.bySvc[svc][s.UID]
	return ok && w.generation != deletedGeneration
}

// OwnWrite reports whether a slice event only shows the controller's own
// write, or an older version of the slice: no one else changed it. The
// resourceVersion tells: every write changes it, a label or
// ownerReference edit too, which leaves the generation alone.
func (t *Tracker) OwnWrite(svc types.NamespacedName, s *discoveryv1.EndpointSlice) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFlight[s.UID] {
		return true
	}
	w, ok := t.bySvc[svc][s.UID]
	if !ok || w.generation == deletedGeneration {
		return false
	}
	if s.ResourceVersion == w.resourceVersion {
		return true
	}
	newer, err := resourceversion.CompareResourceVersion(s.ResourceVersion, w.resourceVersion)
	if err != nil {
		return s.Generation <= w.generation
	}
	return newer < 0
}

// Waiting reports whether the Service's last sync found its cache
// missing one of the controller's writes (Stale): every event of its
// slices, its own writes' too, then triggers a sync.
func (t *Tracker) Waiting(svc types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting[svc]
}

// Forget drops what is known of a Service that is gone.
func (t *Tracker) Forget(svc types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.bySvc, svc)
	delete(t.waiting, svc)
	t.repairs.Take(svc)
}
