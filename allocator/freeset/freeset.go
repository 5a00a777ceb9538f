// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package freeset is the occupancy structure behind svcnet's allocators: a
// set of indexes in [0, size) that finds the lowest free index at or above a
// bound in O(log64 size), however full the set is, and that allocates memory
// only for the parts of the range in use, so that an IPv6 /64 costs nothing
// until addresses are taken.
//
// It is a 64-ary tree of bit words. A leaf word has one bit per index; an
// inner node has one "full" bit per child, set when that child has no free
// index left. A missing child is an all-free subtree.
package freeset

import (
	"fmt"
	"math/bits"
)

const (
	fanoutBits = 6
	fanout     = 1 << fanoutBits
)

type node struct {
	// full: in a leaf, bit i is index base+i; in an inner node, bit i says
	// child i is completely used.
	full uint64
	kids *[fanout]*node
}

// Set holds the used indexes of a range of size indexes.
type Set struct {
	size   uint64
	levels int // leaf is level 0; the root is level levels-1
	root   *node
	count  uint64
}

// New returns an empty set over [0, size).
func New(size uint64) *Set {
	levels := 1
	for levels*fanoutBits < 64 && size > uint64(1)<<(levels*fanoutBits) {
		levels++
	}
	return &Set{size: size, levels: levels}
}

// Size is the number of indexes in the range.
func (s *Set) Size() uint64 { return s.size }

// Len is the number of used indexes.
func (s *Set) Len() uint64 { return s.count }

// Has reports whether i is used.
func (s *Set) Has(i uint64) bool {
	if i >= s.size {
		return false
	}
	n := s.root
	for level := s.levels - 1; n != nil; level-- {
		slot := (i >> (level * fanoutBits)) & (fanout - 1)
		if level == 0 {
			return n.full&(1<<slot) != 0
		}
		if n.full&(1<<slot) != 0 {
			return true
		}
		n = n.kids[slot]
	}
	return false
}

// Add marks i used. It reports whether i was free before.
func (s *Set) Add(i uint64) bool {
	if i >= s.size {
		panic(fmt.Sprintf("freeset: index %d out of range [0, %d)", i, s.size))
	}
	if s.root == nil {
		s.root = newNode(s.levels - 1)
	}
	if !add(s.root, s.levels-1, i) {
		return false
	}
	s.count++
	return true
}

func newNode(level int) *node {
	if level == 0 {
		return &node{}
	}
	return &node{kids: new([fanout]*node)}
}

// add sets i below n and keeps the full bits on the way up right.
func add(n *node, level int, i uint64) bool {
	slot := (i >> (level * fanoutBits)) & (fanout - 1)
	bit := uint64(1) << slot
	if level == 0 {
		if n.full&bit != 0 {
			return false
		}
		n.full |= bit
		return true
	}
	if n.full&bit != 0 {
		return false
	}
	kid := n.kids[slot]
	if kid == nil {
		kid = newNode(level - 1)
		n.kids[slot] = kid
	}
	if !add(kid, level-1, i) {
		return false
	}
	if kid.full == ^uint64(0) {
		n.full |= bit
	}
	return true
}

// Remove marks i free. It reports whether i was used before.
func (s *Set) Remove(i uint64) bool {
	if i >= s.size || s.root == nil {
		return false
	}
	if !remove(s.root, s.levels-1, i) {
		return false
	}
	s.count--
	return true
}

func remove(n *node, level int, i uint64) bool {
	slot := (i >> (level * fanoutBits)) & (fanout - 1)
	bit := uint64(1) << slot
	if level == 0 {
		if n.full&bit == 0 {
			return false
		}
		n.full &^= bit
		return true
	}
	kid := n.kids[slot]
	if kid == nil || !remove(kid, level-1, i) {
		return false
	}
	n.full &^= bit
	if kid.full == 0 && (level == 1 || kid.empty()) {
		// Give back the memory of subtrees that hold nothing.
		n.kids[slot] = nil
	}
	return true
}

func (n *node) empty() bool {
	if n.full != 0 {
		return false
	}
	for _, k := range n.kids {
		if k != nil {
			return false
		}
	}
	return true
}

// NextFree returns the lowest free index in [lo, hi), and false when every
// index there is used. hi is capped at the set's size.
func (s *Set) NextFree(lo, hi uint64) (uint64, bool) {
	hi = min(hi, s.size)
	if lo >= hi {
		return 0, false
	}
	return next(s.root, s.levels-1, 0, lo, hi)
}

// next searches the subtree n, which covers indexes from base on, for the
// lowest free index in [lo, hi). Only the first and last children that
// [lo, hi) cuts can fail, so the search visits O(levels) nodes.
func next(n *node, level int, base, lo, hi uint64) (uint64, bool) {
	if n == nil {
		return max(lo, base), true
	}
	shift := level * fanoutBits
	first := uint64(0)
	if lo > base {
		first = (lo - base) >> shift
	}
	last := (hi - 1 - base) >> shift
	if last >= fanout {
		last = fanout - 1
	}
	if first > last {
		return 0, false
	}
	window := (^uint64(0) << first) & (^uint64(0) >> (fanout - 1 - last))
	candidates := ^n.full & window
	for candidates != 0 {
		slot := uint64(bits.TrailingZeros64(candidates))
		candidates &^= 1 << slot
		childBase := base + slot<<shift
		if level == 0 {
			return childBase, true
		}
		if i, ok := next(n.kids[slot], level-1, childBase, lo, hi); ok {
			return i, true
		}
	}
	return 0, false
}
