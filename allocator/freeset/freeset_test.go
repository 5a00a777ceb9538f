// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package freeset

import (
	"math"
	"math/rand/v2"
	"testing"
)

// naiveNextFree is the obvious linear scan the tree must agree with.
func naiveNextFree(used map[uint64]bool, lo, hi, size uint64) (uint64, bool) {
	for i := lo; i < min(hi, size); i++ {
		if !used[i] {
			return i, true
		}
	}
	return 0, false
}

func TestAgainstNaive(t *testing.T) {
	for _, size := range []uint64{1, 5, 63, 64, 65, 4095, 4096, 4097, 70000} {
		rng := rand.New(rand.NewPCG(size, 7))
		s := New(size)
		used := map[uint64]bool{}
		for step := range 4000 {
			i := rng.Uint64N(size)
			if rng.IntN(3) == 0 {
				if got, want := s.Remove(i), used[i]; got != want {
					t.Fatalf("size %d step %d: Remove(%d) = %v, want %v", size, step, i, got, want)
				}
				delete(used, i)
			} else {
				if got, want := s.Add(i), !used[i]; got != want {
					t.Fatalf("size %d step %d: Add(%d) = %v, want %v", size, step, i, got, want)
				}
				used[i] = true
			}
			if s.Len() != uint64(len(used)) {
				t.Fatalf("size %d step %d: Len = %d, want %d", size, step, s.Len(), len(used))
			}
			lo, hi := rng.Uint64N(size), rng.Uint64N(size+1)
			gotI, gotOK := s.NextFree(lo, hi)
			wantI, wantOK := naiveNextFree(used, lo, hi, size)
			if gotI != wantI || gotOK != wantOK {
				t.Fatalf("size %d step %d: NextFree(%d, %d) = %d,%v, want %d,%v", size, step, lo, hi, gotI, gotOK, wantI, wantOK)
			}
			if s.Has(i) != used[i] {
				t.Fatalf("size %d: Has(%d) = %v", size, i, s.Has(i))
			}
		}
	}
}

func TestFullRange(t *testing.T) {
	const size = 1000
	s := New(size)
	for i := range uint64(size) {
		if got, ok := s.NextFree(0, size); !ok || got != i {
			t.Fatalf("NextFree = %d,%v, want %d", got, ok, i)
		}
		s.Add(i)
	}
	if i, ok := s.NextFree(0, size); ok {
		t.Fatalf("full set returned free index %d", i)
	}
	s.Remove(517)
	if i, ok := s.NextFree(0, size); !ok || i != 517 {
		t.Fatalf("NextFree after Remove(517) = %d,%v", i, ok)
	}
}

func TestHugeRangeIsSparse(t *testing.T) {
	s := New(math.MaxUint64) // an IPv6 /64 without its network address
	top := uint64(math.MaxUint64 - 1)
	if !s.Add(top) || !s.Has(top) {
		t.Fatal("could not use the last index of a 2^64 range")
	}
	if i, ok := s.NextFree(top, math.MaxUint64); ok {
		t.Fatalf("NextFree found %d above the only, used, index", i)
	}
	if i, ok := s.NextFree(1<<63, math.MaxUint64); !ok || i != 1<<63 {
		t.Fatalf("NextFree = %d,%v", i, ok)
	}
	s.Remove(top)
	if s.root.kids[15] != nil {
		t.Fatal("removing the only index did not give its subtree back")
	}
}
