// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// nodeOwner owns the elements that come from the node, not a Service.
const nodeOwner = " node"

// Backend is the nftables implementation of dataplane.Backend for one IP
// family. The first sync, the one after a failure and forced ones are
// full: the live table is listed, every chain and static set flushed and
// refilled, and whatever the table holds that is no longer wanted deleted.
// The others write only the elements, chains and sets that changed. Each
// sync is one nft transaction: a failed one leaves the previous table in
// place.
type Backend struct {
	family corev1.IPFamily
	fam    family
	cfg    Config
	nft    knftables.Interface

	mu      sync.Mutex
	st      *state
	applied map[string]*object
	// needFull makes the next sync full; recreate makes it delete and
	// re-create the table in the same transaction (after a failed full
	// sync, whatever the table held that blocked it goes too).
	needFull, recreate bool
}

var _ dataplane.Backend = (*Backend)(nil)

// NewBackend returns a backend writing through nft (NewInterface's, or
// knftables.NewFake in tests) for the table of family.
func NewBackend(family corev1.IPFamily, nft knftables.Interface, cfg Config) *Backend {
	b := &Backend{family: family, fam: familyOf(family), cfg: cfg, nft: nft, st: newState(), needFull: true}
	b.st.rewriteAll()
	return b
}

// Mode implements dataplane.Backend.
func (b *Backend) Mode() string { return Mode }

// Family implements dataplane.Backend.
func (b *Backend) Family() corev1.IPFamily { return b.family }

// SetService implements dataplane.Backend.
func (b *Backend) SetService(svc types.NamespacedName, ports []*model.ServicePort) {
	var f *Fragment
	if len(ports) > 0 {
		f = Render(b.fam, ports)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.st.set(svc.String(), f)
}

// ForceFull implements dataplane.Backend.
func (b *Backend) ForceFull() {
	b.mu.Lock()
	b.needFull = true
	b.st.rewriteAll()
	b.mu.Unlock()
}

// Cleanup implements dataplane.Backend: the table goes.
func (b *Backend) Cleanup(ctx context.Context) error {
	return Cleanup(ctx, b.nft)
}

// Sync implements dataplane.Backend.
func (b *Backend) Sync(ctx context.Context, node dataplane.Node) (dataplane.SyncResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.st.set(nodeOwner, nodeFragment(node.NodePortIPs))
	desired := b.desired(node)
	full := b.needFull
	var n int
	var err error
	if full {
		live, listErr := b.listLive(ctx)
		if listErr != nil {
			return dataplane.SyncResult{Full: true}, listErr
		}
		n, err = b.syncFull(ctx, desired, live)
	} else {
		n, err = b.syncPartial(ctx, desired)
	}
	if n == 0 && err == nil {
		b.st.markApplied()
		return dataplane.SyncResult{Full: full}, nil
	}
	if err != nil {
		b.recreate = full
		b.needFull = true
		b.st.rewriteAll()
		return dataplane.SyncResult{Full: full}, fmt.Errorf("applying %d changes: %w", n, err)
	}
	b.applied = desired
	if full {
		b.markAllApplied()
	} else {
		b.st.markApplied()
	}
	b.needFull, b.recreate = false, false
	return dataplane.SyncResult{Full: full, Rules: n}, nil
}

func nodeFragment(nodePortIPs []netip.Addr) *Fragment {
	f := &Fragment{}
	for _, ip := range nodePortIPs {
		f.elems = append(f.elems, elem{set: setNodePortIPs, key: ip.String()})
	}
	return f
}

// desired is every object the table should have, by name.
func (b *Backend) desired(node dataplane.Node) map[string]*object {
	out := map[string]*object{}
	for _, o := range layout(b.fam, b.cfg, node, b.st.countsByPick()) {
		out[o.name] = o
	}
	for name, ref := range b.st.objects {
		out[name] = ref.obj
	}
	return out
}

// liveTable is what a listing of the table found.
type liveTable struct {
	chains, sets, maps []string
}

// has tells whether the table holds a set or map of that name.
func (l liveTable) has(name string) bool {
	return slices.Contains(l.sets, name) || slices.Contains(l.maps, name)
}

func (b *Backend) listLive(ctx context.Context) (liveTable, error) {
	all, err := b.nft.ListAll(ctx)
	if knftables.IsNotFound(err) {
		return liveTable{}, nil
	}
	if err != nil {
		return liveTable{}, fmt.Errorf("%w: listing table %s: %w", dataplane.ErrListRules, TableName, err)
	}
	live := liveTable{chains: all["chain"], sets: all["set"], maps: all["map"]}
	for _, names := range [][]string{live.chains, live.sets, live.maps} {
		slices.Sort(names)
	}
	return live, nil
}

// netlink is the interface's netlink element writer, nil when it has none
// (knftables' Fake): then every element goes in the knftables transaction.
func (b *Backend) netlink() *netlinkElements {
	if w, ok := b.nft.(netlinkWriter); ok {
		return w.netlink()
	}
	return nil
}

// syncFull rewrites the live table. Through knftables alone it is one
// transaction: the objects (fullTransaction), then every element. With
// netlink, the objects, rules and verdict map elements go first in one
// nft transaction, then each data set or map is emptied and refilled in
// one netlink transaction of its own (a set that was not in the table is
// filled in bounded chunks): nft parses no element and the agent never
// holds the whole table as text. Between the two, only elements that
// changed since the table was written (while the agent was down, or after
// a failed sync) can be out of step with the rules. After a failed full
// sync (recreate) everything goes in one knftables transaction, so that
// the re-created table is never seen empty.
func (b *Backend) syncFull(ctx context.Context, desired map[string]*object, live liveTable) (int, error) {
	nl := b.netlink()
	if b.recreate {
		nl = nil
	}
	tx, n := b.fullTransaction(desired, live, nl != nil)
	if nl == nil {
		ids := slices.DeleteFunc(sortedIDs(b.st.elems), func(id elemID) bool {
			_, ok := b.st.elems[id].wantAll()
			return !ok || desired[id.set] == nil
		})
		for _, id := range ids {
			v, _ := b.st.elems[id].wantAll()
			tx.Add(id.knftWith(v, desired[id.set].kind == kindMap))
		}
		return n + len(ids), b.nft.Run(ctx, tx)
	}
	// Over netlink, elements only need grouping by set: sorting a million
	// of them cost seconds.
	bySet := map[string][]elemID{}
	for id, st := range b.st.elems {
		o := desired[id.set]
		if _, ok := st.wantAll(); !ok || o == nil {
			continue
		}
		n++
		if o.isData() {
			bySet[id.set] = append(bySet[id.set], id)
			continue
		}
		v, _ := st.wantAll()
		tx.Add(id.knftWith(v, o.kind == kindMap))
	}
	if err := b.nft.Run(ctx, tx); err != nil {
		return n, err
	}
	return n, b.loadElements(ctx, nl, desired, live, bySet)
}

// loadElements writes the data elements over netlink, set by set: a set
// the table held is flushed and refilled in one transaction, a new one
// filled in chunks.
func (b *Backend) loadElements(ctx context.Context, nl *netlinkElements, desired map[string]*object, live liveTable, bySet map[string][]elemID) error {
	batch := nl.batch()
	var names []string
	for name, o := range desired {
		if o.isData() {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	// A transaction is sent once it holds maxChunkBytes, but never between
	// a set's flush and its last element.
	commitFull := func() error {
		if batch.pendingBytes() < maxChunkBytes {
			return nil
		}
		if err := batch.commit(); err != nil {
			return err
		}
		return ctx.Err()
	}
	for _, name := range names {
		o, ids, refill := desired[name], bySet[name], live.has(name)
		if refill {
			batch.flushSet(name)
		}
		for _, id := range ids {
			v, _ := b.st.elems[id].wantAll()
			batch.add(o, id.key, v)
			if !refill {
				if err := commitFull(); err != nil {
					return err
				}
			}
		}
		if err := commitFull(); err != nil {
			return err
		}
	}
	return batch.commit()
}

// syncPartial applies what changed since the last applied sync: over
// netlink in one transaction when only data elements changed (an endpoint
// change), else as one knftables transaction (partialTransaction).
func (b *Backend) syncPartial(ctx context.Context, desired map[string]*object) (int, error) {
	if nl := b.netlink(); nl != nil && b.onlyDataChanged(desired) {
		return b.partialElements(ctx, nl, desired)
	}
	tx, n := b.partialTransaction(desired)
	if n == 0 {
		return 0, nil
	}
	return n, b.nft.Run(ctx, tx)
}

// onlyDataChanged tells whether no object changed since the last applied
// sync and every changed element is in a data set or map.
func (b *Backend) onlyDataChanged(desired map[string]*object) bool {
	if len(desired) != len(b.applied) {
		return false
	}
	for name, o := range desired {
		if a := b.applied[name]; a == nil || a.content != o.content {
			return false
		}
	}
	for id := range b.st.dirty {
		if !desired[id.set].isData() {
			return false
		}
	}
	return true
}

// partialElements writes the changed data elements in one netlink
// transaction: the old values out, the new ones in.
func (b *Backend) partialElements(ctx context.Context, nl *netlinkElements, desired map[string]*object) (int, error) {
	batch := nl.batch()
	n := 0
	var adds []elemID
	for _, id := range sortedIDs(b.st.dirty) {
		st := b.st.elems[id]
		if st == nil {
			continue
		}
		v, ok := st.want()
		if st.present && (!ok || v != st.applied) {
			batch.del(desired[id.set], id.key)
			n++
		}
		if ok && (!st.present || v != st.applied) {
			adds = append(adds, id)
		}
	}
	for _, id := range adds {
		w, _ := b.st.elems[id].wantAll()
		batch.add(desired[id.set], id.key, w)
		n++
	}
	if n == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return n, err
	}
	return n, batch.commit()
}

// fullTransaction rewrites the table's objects: live chains (and, unless
// dataOverNetlink, static sets) are flushed, what is no longer wanted
// deleted, and every object and rule written; syncFull adds the elements.
// The affinity sets keep the clients they remember.
func (b *Backend) fullTransaction(desired map[string]*object, live liveTable, dataOverNetlink bool) (*knftables.Transaction, int) {
	tx := b.nft.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for svcnet agent")})
	if b.recreate {
		tx.Delete(&knftables.Table{})
		tx.Add(&knftables.Table{Comment: knftables.PtrTo("rules for svcnet agent")})
		live = liveTable{}
	}
	for _, name := range live.chains {
		tx.Flush(&knftables.Chain{Name: name})
	}
	var stale []*object
	for _, name := range append(slices.Clone(live.sets), live.maps...) {
		switch o := desired[name]; {
		case o == nil:
			kind := kindSet
			if slices.Contains(live.maps, name) {
				kind = kindMap
			}
			stale = append(stale, &object{kind: kind, name: name})
		case o.dynamic(), dataOverNetlink && o.isData():
		default:
			flushObject(tx, o)
		}
	}
	for _, o := range stale {
		deleteSet(tx, o)
	}
	for _, name := range live.chains {
		if desired[name] == nil {
			tx.Delete(&knftables.Chain{Name: name})
		}
	}
	return tx, addObjects(tx, sortedObjects(desired))
}

// partialTransaction writes what changed since the last applied sync, in
// an order the kernel accepts: elements out, changed chains flushed, stale
// chains and sets deleted, new objects and rules in, elements in.
func (b *Backend) partialTransaction(desired map[string]*object) (*knftables.Transaction, int) {
	tx := b.nft.NewTransaction()
	n := 0
	var adds []elemID
	for _, id := range sortedIDs(b.st.dirty) {
		st := b.st.elems[id]
		if st == nil {
			continue
		}
		v, ok := st.want()
		if st.present && (!ok || v != st.applied) && desired[id.set] != nil && b.applied[id.set] != nil {
			tx.Delete(id.knft(st.applied, desired[id.set].kind == kindMap))
			n++
		}
		if ok && (!st.present || v != st.applied) {
			adds = append(adds, id)
		}
	}
	var changed, removed []*object
	for name, o := range desired {
		if a := b.applied[name]; a == nil || a.content != o.content {
			changed = append(changed, o)
		}
	}
	for name, a := range b.applied {
		if desired[name] == nil {
			removed = append(removed, a)
		}
	}
	sortByName(changed)
	sortByName(removed)
	n += b.replaceObjects(tx, changed, removed)
	for _, id := range adds {
		if o := desired[id.set]; o != nil {
			w, _ := b.st.elems[id].wantAll()
			tx.Add(id.knftWith(w, o.kind == kindMap))
			n++
		}
	}
	return tx, n
}

// replaceObjects flushes changed chains, deletes removed objects and sets
// whose definition changed, and writes the changed objects.
func (b *Backend) replaceObjects(tx *knftables.Transaction, changed, removed []*object) int {
	n := 0
	for _, o := range append(slices.Clone(changed), removed...) {
		if o.kind == kindChain && b.applied[o.name] != nil {
			tx.Flush(&knftables.Chain{Name: o.name})
		}
	}
	for _, o := range removed {
		if o.isSetOrMap() {
			deleteSet(tx, o)
			n++
		}
	}
	for _, o := range changed {
		if o.isSetOrMap() && b.applied[o.name] != nil {
			deleteSet(tx, o)
		}
	}
	for _, o := range removed {
		if o.kind == kindChain {
			tx.Delete(&knftables.Chain{Name: o.name})
			n++
		}
	}
	return n + addObjects(tx, changed)
}

// addObjects writes sets and maps, then chains, then the chains' rules;
// it counts the rules.
func addObjects(tx *knftables.Transaction, objs []*object) int {
	for _, o := range objs {
		switch o.kind {
		case kindSet:
			tx.Add(o.set)
		case kindMap:
			tx.Add(o.m)
		}
	}
	for _, o := range objs {
		if o.kind == kindChain {
			tx.Add(o.chain)
		}
	}
	n := 0
	for _, o := range objs {
		for _, r := range o.rules {
			tx.Add(r)
			n++
		}
	}
	return n
}

func deleteSet(tx *knftables.Transaction, o *object) {
	if o.kind == kindMap {
		tx.Delete(&knftables.Map{Name: o.name})
	} else {
		tx.Delete(&knftables.Set{Name: o.name})
	}
}

func flushObject(tx *knftables.Transaction, o *object) {
	if o.kind == kindMap {
		tx.Flush(&knftables.Map{Name: o.name})
	} else {
		tx.Flush(&knftables.Set{Name: o.name})
	}
}

func (b *Backend) markAllApplied() {
	for id, st := range b.st.elems {
		st.applied, st.present = st.want()
		if !st.present {
			delete(b.st.elems, id)
		}
	}
	b.st.dirty = map[elemID]bool{}
	b.st.allDirty = false
}

func sortedObjects(m map[string]*object) []*object {
	out := make([]*object, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	sortByName(out)
	return out
}

func sortByName(objs []*object) {
	slices.SortFunc(objs, func(a, b *object) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
}

// sortedIDs lists a map's element IDs in set and key order, so that
// transactions are the same from one run to the next.
func sortedIDs[V any](m map[elemID]V) []elemID {
	ids := make([]elemID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b elemID) int {
		if c := strings.Compare(a.set, b.set); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return ids
}
