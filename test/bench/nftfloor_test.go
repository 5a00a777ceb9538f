// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"
	"time"
)

// TestFloorRendering: each layout's runs apart, the medians of the cold
// loads and of each run's change p50 with their ranges, the slowest of
// all the changes with their count, and the ratio of the medians.
func TestFloorRendering(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		var out []time.Duration
		for _, v := range vs {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	rec := &record[floorData]{Section: "k", Recorded: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), Took: 9 * time.Minute, Commit: "abc",
		Tools: map[string]string{"kube-proxy": "v1.37.1", "nft": "nftables v1.0.6"}, Data: floorData{Changes: 3, Repeats: 2, Sizes: []floorSize{{
			Services: 1000, KubeProxyColdTransactions: 2, KubeProxyColdBytes: 2_500_000, Runs: []floorRun{
				{Layout: floorSvcnet, Load: 400 * time.Millisecond, Changes: ms(10, 12, 30)},
				{Layout: floorKubeProxy, Load: 2 * time.Second, Changes: ms(40, 50, 60)},
				{Layout: floorSvcnet, Load: 600 * time.Millisecond, Changes: ms(14, 16, 18)},
				{Layout: floorKubeProxy, Load: 3 * time.Second, Changes: ms(44, 90, 46)}}}}}}
	got := renderFloor(rec)
	hasAll(t, got,
		"| svcnet | 1000 | 0.500 (0.400-0.600) | 14.0 (12.0-16.0) | 30.0 (of 6) |",
		"| kube-proxy (its cold sync: 2 transactions, 2.5 MB) | 1000 | 2.500 (2.000-3.000) | 48.0 (46.0-50.0) | 90.0 (of 6) |",
		"| **svcnet/kube-proxy** | 1000 | **0.20x** | **0.29x** | |",
		"kube-proxy's side (v1.37.1, nftables mode", "3 changes a run", "Each layout runs 2 times",
	)
}
