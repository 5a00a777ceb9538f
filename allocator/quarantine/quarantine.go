// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package quarantine holds released addresses or ports out of use for a
// while, remembering who released them: svcnet's allocators reuse a released
// value only after its quarantine, the one released longest ago first, and a
// Service re-created under the same name gets its own value back.
package quarantine

import (
	"container/list"
	"time"
)

// Entry is one released value.
type Entry[K comparable] struct {
	Value    K
	Owner    string // namespace/name of the Service that held it
	Released time.Time
}

// List keeps entries in release order. It is not safe for concurrent use;
// the allocators hold their own lock.
type List[K comparable] struct {
	order   *list.List // of *Entry[K], oldest first
	byValue map[K]*list.Element
	byOwner map[string][]K
	limit   int
}

// New returns an empty list that keeps at most limit entries (the oldest
// are dropped first); limit <= 0 means no limit.
func New[K comparable](limit int) *List[K] {
	return &List[K]{order: list.New(), byValue: map[K]*list.Element{}, byOwner: map[string][]K{}, limit: limit}
}

// Len is the number of entries.
func (l *List[K]) Len() int { return len(l.byValue) }

// Has reports whether v is in quarantine.
func (l *List[K]) Has(v K) bool { _, ok := l.byValue[v]; return ok }

// Push records that owner released v at time at. It returns the entries
// dropped to stay under the limit, which their caller must free.
func (l *List[K]) Push(v K, owner string, at time.Time) (dropped []K) {
	l.Remove(v)
	l.byValue[v] = l.order.PushBack(&Entry[K]{Value: v, Owner: owner, Released: at})
	l.byOwner[owner] = append(l.byOwner[owner], v)
	for l.limit > 0 && len(l.byValue) > l.limit {
		oldest := l.order.Front().Value.(*Entry[K]).Value
		l.Remove(oldest)
		dropped = append(dropped, oldest)
	}
	return dropped
}

// Remove takes v out of quarantine and reports whether it was there.
func (l *List[K]) Remove(v K) bool {
	el, ok := l.byValue[v]
	if !ok {
		return false
	}
	e := l.order.Remove(el).(*Entry[K])
	delete(l.byValue, v)
	owned := l.byOwner[e.Owner]
	for i, o := range owned {
		if o == v {
			owned = append(owned[:i], owned[i+1:]...)
			break
		}
	}
	if len(owned) == 0 {
		delete(l.byOwner, e.Owner)
	} else {
		l.byOwner[e.Owner] = owned
	}
	return true
}

// Owned returns what owner released and is still held, oldest first.
func (l *List[K]) Owned(owner string) []K { return l.byOwner[owner] }

// Oldest returns the entry released longest ago that satisfies ok, looking
// only at entries released at or before notAfter (use the zero time for no
// bound).
func (l *List[K]) Oldest(notAfter time.Time, ok func(K) bool) (K, bool) {
	for el := l.order.Front(); el != nil; el = el.Next() {
		e := el.Value.(*Entry[K])
		if !notAfter.IsZero() && e.Released.After(notAfter) {
			break
		}
		if ok(e.Value) {
			return e.Value, true
		}
	}
	var zero K
	return zero, false
}

// Each calls f for every entry, oldest first.
func (l *List[K]) Each(f func(Entry[K])) {
	for el := l.order.Front(); el != nil; el = el.Next() {
		f(*el.Value.(*Entry[K]))
	}
}
