// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestInParallel(t *testing.T) {
	cases := map[string]struct {
		items    int
		failing  map[int]bool
		wantErrs []string
	}{
		"none":                      {items: 0},
		"one":                       {items: 1},
		"sequential":                {items: sequentialWrites, failing: map[int]bool{1: true}, wantErrs: []string{"item 1"}},
		"one failing":               {items: 1, failing: map[int]bool{0: true}, wantErrs: []string{"item 0"}},
		"more than the bound":       {items: 3 * maxParallelWrites},
		"errors come in item order": {items: 20, failing: map[int]bool{3: true, 17: true, 9: true}, wantErrs: []string{"item 3", "item 9", "item 17"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			items := make([]int, tc.items)
			for i := range items {
				items[i] = i
			}
			var mu sync.Mutex
			called := map[int]int{}
			var inFlight, peak atomic.Int32
			errs := inParallel(items, func(i int) error {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(time.Millisecond) // let the others pile up
				mu.Lock()
				called[i]++
				mu.Unlock()
				if tc.failing[i] {
					return fmt.Errorf("item %d", i)
				}
				return nil
			})
			var got []string
			for _, err := range errs {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(tc.wantErrs, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			for _, i := range items {
				if called[i] != 1 {
					t.Errorf("item %d handled %d times, want once", i, called[i])
				}
			}
			if p := peak.Load(); p > maxParallelWrites {
				t.Errorf("%d calls in flight at once, bound is %d", p, maxParallelWrites)
			}
			if tc.items <= sequentialWrites && peak.Load() > 1 {
				t.Errorf("%d calls in flight at once in a small sync", peak.Load())
			}
			if tc.items > maxParallelWrites && peak.Load() < 2 {
				t.Error("calls never overlapped")
			}
		})
	}
}
