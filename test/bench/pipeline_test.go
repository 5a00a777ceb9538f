// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"
)

// TestPipelineRendering: (j) and (l) as two sections from one record,
// each kind of cluster apart, the p50 as the median of the clusters'
// with its range, the slowest of every run with their count, the ratio
// of the first two kinds alone, and no p99 named from too few queries.
func TestPipelineRendering(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		var out []time.Duration
		for _, v := range vs {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	cluster := func(side string, base int, queries int) pipelineCluster {
		d := ms(base, base+10, base+200)
		st := []scaleStages{{RS: 5 * time.Millisecond, Created: 10 * time.Millisecond, Bound: 15 * time.Millisecond, Ready: 20 * time.Millisecond, Slice: 30 * time.Millisecond}}
		return pipelineCluster{Side: side, CreateReq: d, CreateProg: d, ScaleReq: d, ScaleProg: ms(base), BusyReq: d, BusyProg: ms(base),
			ScaleStages: st, BusyStages: st, CPU: float64(base) / 10,
			DNS: dnsResult{Resolve: d, Reach: d, Headless: d, QPS: 1000, Queries: queries, QueryP50: time.Millisecond, QueryP99: 4 * time.Millisecond}}
	}
	rec := &record[pipelineData]{Section: "jl", Recorded: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), Took: 30 * time.Minute, Commit: "abc",
		Tools: map[string]string{"kube-proxy": "v1.37.1", "kube-controller-manager": "v1.37.1", "iptables": "iptables v1.8.9 (nf_tables)", "coredns": "1.15.0"},
		Data: pipelineData{Nodes: 3, Runs: 3, Repeats: 2, Settle: time.Second, RequestGap: 2 * time.Millisecond, RequestTimeout: 50 * time.Millisecond,
			ProbeGap: 2 * time.Millisecond, QPSClients: 16, QPSDuration: 5 * time.Second, Sides: pipelineSides, Clusters: []pipelineCluster{
				cluster(pipelineSides[0].Name, 100, 5000), cluster(pipelineSides[1].Name, 1000, 5000), cluster(pipelineSides[2].Name, 40, 500),
				cluster(pipelineSides[0].Name, 120, 5000), cluster(pipelineSides[1].Name, 1100, 5000), cluster(pipelineSides[2].Name, 60, 500)}}}
	got := renderPipeline(rec)
	_, sections := splitSections(got)
	if len(sections) != 2 || sections[0].title != pipelineTitle(3) || sections[1].title != dnsTitle(3) {
		t.Fatalf("rendered sections %v, want (j)'s and (l)'s", sections)
	}
	hasAll(t, got,
		"| (j1) create Service -> client request succeeds | svcnet, kube-proxy's settings | 120.0 (110.0-130.0) | 320.0 (of 6) |",
		"| (j1) create Service -> client request succeeds | upstream, its defaults | 1060.0 (1010.0-1110.0) | 1300.0 (of 6) |",
		"| (j1) create Service -> client request succeeds | **svcnet, kube-proxy's settings / upstream, its defaults** | **0.11x** | |",
		"| (j1) create Service -> client request succeeds | svcnet, its defaults | 60.0 (50.0-70.0) | 260.0 (of 6) |",
		"`--pipeline=svcnet --min-sync-period=1s` with GOGC=100 for every program",
		"| -> every node reprogrammed (node proxies) | 90.0 ms | 1070.0 ms | 30.0 ms |",
		"svcnet, kube-proxy's settings 11.0 (10.0-12.0); upstream, its defaults 105.0 (100.0-110.0)",
		"| upstream, its defaults | 1000 (1000-1000) | 1.00 (1.00-1.00) | 4.00 (4.00-4.00) | 0 (0-0) |",
		"| svcnet, its defaults | 1000 (1000-1000) | 1.00 (1.00-1.00) | - (500 queries) |",
		"Each kind runs 2 clusters", "each cluster measures each row 3 times",
	)
	if strings.Count(got, "**0.") != 6+3 {
		t.Errorf("want a ratio row for each of (j)'s 6 and (l)'s 3 measures:\n%s", got)
	}
}
