// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"slices"
	"strings"
)

// state is what the table should hold: every Service's fragment folded
// into elements (each with the Services that want it), the endpoint counts
// in use, and the Services' own objects. It remembers which elements
// changed since the last applied sync, so that a sync writes only those.
type state struct {
	// held is what each owner's fragment put in, to take out again.
	held  map[string]*held
	elems map[elemID]*elemState
	// counts holds, per pick and endpoint count, how many ports use it.
	counts map[count]int
	// objects are the Services' own objects with the number of fragments
	// holding them.
	objects map[string]*objectRef
	dirty   map[elemID]bool
	// allDirty is set while the next sync rewrites every element anyway
	// (a full one): dirty is then not kept, which at 50,000 Services is a
	// map of a million entries.
	allDirty bool
}

// elemState is one element: the value each owner wants, and what was last
// applied.
type elemState struct {
	// owners are sorted by owner. Nearly every element has one, so a
	// slice: a map per element would be most of the agent's memory.
	owners  []owned
	applied string
	// present tells whether the element is in the table.
	present bool
}

// owned is what one owner wants of an element.
type owned struct {
	owner string
	wanted
}

// put sets what owner wants.
func (st *elemState) put(owner string, w wanted) {
	i, found := slices.BinarySearchFunc(st.owners, owner, func(o owned, name string) int { return strings.Compare(o.owner, name) })
	if found {
		st.owners[i].wanted = w
		return
	}
	st.owners = slices.Insert(st.owners, i, owned{owner: owner, wanted: w})
}

// drop forgets what owner wants.
func (st *elemState) drop(owner string) {
	st.owners = slices.DeleteFunc(st.owners, func(o owned) bool { return o.owner == owner })
}

type objectRef struct {
	obj  *object
	refs int
}

func newState() *state {
	return &state{
		held:    map[string]*held{},
		elems:   map[elemID]*elemState{},
		counts:  map[count]int{},
		objects: map[string]*objectRef{},
		dirty:   map[elemID]bool{},
	}
}

// held is what a fragment put into the state: its elements' IDs, sized
// exactly (the fragment's own elements, with the slack of their appends
// and the values the element states hold anyway, cost far more memory),
// its counts and its objects.
type held struct {
	ids     []elemID
	counts  []count
	objects []*object
}

// set replaces owner's fragment; nil removes it.
func (s *state) set(owner string, f *Fragment) {
	if old := s.held[owner]; old != nil {
		s.release(owner, old)
		delete(s.held, owner)
	}
	if f == nil {
		return
	}
	h := &held{ids: make([]elemID, len(f.elems)), counts: slices.Clip(f.counts), objects: slices.Clip(f.objects)}
	for i, e := range f.elems {
		id := e.id()
		h.ids[i] = id
		st := s.elems[id]
		if st == nil {
			st = &elemState{}
			s.elems[id] = st
		}
		st.put(owner, wanted{value: e.value, comment: e.comment})
		s.markDirty(id)
	}
	s.held[owner] = h
	for _, c := range h.counts {
		s.counts[c]++
	}
	for _, o := range h.objects {
		ref := s.objects[o.name]
		if ref == nil {
			ref = &objectRef{}
			s.objects[o.name] = ref
		}
		ref.obj = o
		ref.refs++
	}
}

func (s *state) release(owner string, h *held) {
	for _, id := range h.ids {
		if st := s.elems[id]; st != nil {
			st.drop(owner)
			s.markDirty(id)
		}
	}
	for _, c := range h.counts {
		if s.counts[c]--; s.counts[c] <= 0 {
			delete(s.counts, c)
		}
	}
	for _, o := range h.objects {
		if ref := s.objects[o.name]; ref != nil {
			if ref.refs--; ref.refs <= 0 {
				delete(s.objects, o.name)
			}
		}
	}
}

func (s *state) markDirty(id elemID) {
	if !s.allDirty {
		s.dirty[id] = true
	}
}

// rewriteAll makes the next sync rewrite every element: changes are no
// longer tracked one by one until markAllApplied.
func (s *state) rewriteAll() {
	s.allDirty = true
	s.dirty = map[elemID]bool{}
}

// wanted is what one owner wants of an element.
type wanted struct {
	value, comment string
}

// want is the value the element should have: the one of its first owner
// in name order (two Services claiming the same external IP and port: the
// older name wins, as in iptables mode's rule order).
func (st *elemState) want() (string, bool) {
	w, ok := st.wantAll()
	return w.value, ok
}

// wantAll is want with the first owner's comment.
func (st *elemState) wantAll() (wanted, bool) {
	if len(st.owners) == 0 {
		return wanted{}, false
	}
	return st.owners[0].wanted, true
}

// countsByPick lists the protocols and endpoint counts in use per pick,
// by protocol and then count.
func (s *state) countsByPick() map[pick][]count {
	out := map[pick][]count{}
	for c := range s.counts {
		out[c.pick] = append(out[c.pick], c)
	}
	for p := range out {
		slices.SortFunc(out[p], func(a, b count) int {
			if a.proto != b.proto {
				return strings.Compare(a.proto, b.proto)
			}
			return a.n - b.n
		})
	}
	return out
}

// markApplied records that the dirty elements are now as wanted.
func (s *state) markApplied() {
	for id := range s.dirty {
		st := s.elems[id]
		if st == nil {
			continue
		}
		st.applied, st.present = st.want()
		if !st.present {
			delete(s.elems, id)
		}
	}
	// A new map: a cleared one keeps the room of the largest sync.
	s.dirty = map[elemID]bool{}
}
