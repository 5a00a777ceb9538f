// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMedianAndSpread(t *testing.T) {
	for _, tc := range []struct {
		vs   []float64
		want string
	}{
		{[]float64{85}, "85"},
		{[]float64{90, 80, 85}, "85 (80-90)"},
		{[]float64{90, 80, 84, 86}, "85 (80-90)"},
	} {
		if got := spreadOf(tc.vs, "%.0f"); got != tc.want {
			t.Errorf("spreadOf(%v) = %q, want %q", tc.vs, got, tc.want)
		}
	}
}

// run is one finished run with one change of each latency.
func run(rss float64, cold time.Duration, changes ...time.Duration) agentResult {
	return agentResult{ColdSync: cold, RSSMiB: rss, Latencies: changes}
}

func TestScaleTargetsJudgeTheMedians(t *testing.T) {
	many := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	rows := []scaleRow{
		// One run of the agent above kube-proxy's, the median below it.
		{Services: 1000, Proxy: scaleSvcnetSameSettings, Runs: []agentResult{run(70, time.Second, time.Millisecond), run(90, time.Second, time.Millisecond), run(71, time.Second, time.Millisecond)}},
		{Services: 1000, Proxy: scaleKubeProxy, Runs: []agentResult{run(85, 2*time.Second, time.Millisecond), run(84, 2*time.Second, time.Millisecond), run(86, 2*time.Second, time.Millisecond)}},
		// The median above kube-proxy's; the agent's defaults are not
		// what is compared.
		{Services: 10000, Proxy: scaleSvcnet, Runs: []agentResult{run(200, time.Second, time.Millisecond)}},
		{Services: 10000, Proxy: scaleSvcnetSameSettings, Runs: []agentResult{run(280, time.Second, time.Millisecond), run(260, time.Second, time.Millisecond), run(275, time.Second, time.Millisecond)}},
		{Services: 10000, Proxy: scaleKubeProxy, Runs: []agentResult{run(273, 4*time.Second, time.Millisecond)}},
		// 20 changes a run: the slowest is judged.
		{Services: 50000, Proxy: scaleSvcnet, Runs: []agentResult{run(1000, 20*time.Second, 5*time.Millisecond, 40*time.Millisecond), run(1000, 31*time.Second, 6*time.Millisecond), run(1000, 14*time.Second, 7*time.Millisecond)}},
		{Services: 50000, Proxy: scaleKubeProxy, NotRun: "above 30000 Services"},
	}
	want := []string{
		"Agent peak RSS below kube-proxy's at the same settings (GOGC=100): 1000 Services: 71 against 85 MiB, met; 10000 Services: 275 against 273 MiB, missed.",
		"Cold sync at 50000 Services under 30s, the agent at its defaults: 20.0 s, met.",
		"One endpoint change at 50000 Services under 20ms p99, judged on the slowest of the 4 changes (too few for a p99): 40.0 ms, missed.",
	}
	if diff := cmp.Diff(want, scaleTargets(rows)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	// With enough changes beyond it, the p99 of them all.
	rows[5].Runs = []agentResult{run(1000, 20*time.Second, append(many(991, 5*time.Millisecond), many(9, 30*time.Millisecond)...)...)}
	if got := scaleTargets(rows)[2]; got != "One endpoint change at 50000 Services under 20ms p99: 5.0 ms over 1000 changes, met." {
		t.Errorf("over 1000 changes: %q", got)
	}
	table := renderScale(&record[scaleData]{Section: "n", Data: scaleData{Changes: 20, Repeats: 3, Rows: rows[:5]}})
	for _, want := range []string{
		"| 1000 | **svcnet GOGC=100 / kube-proxy** | | **0.50x** | **1.00x** | | **0.00x** | **0.84x** |",
		"| 10000 | svcnet agent --mode=nftables, GOGC=100 | 3 | 1.000 (1.000-1.000) | 1.0 (1.0-1.0) | 1.0 (of 3) |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

func TestScaleTargetsWithoutTheLargestSize(t *testing.T) {
	rows := []scaleRow{
		{Services: 1000, Proxy: scaleSvcnet, Runs: []agentResult{run(70, time.Second, time.Millisecond)}},
		{Services: 1000, Proxy: scaleKubeProxy, Errs: []string{"cold sync: timed out"}},
	}
	want := []string{
		"Agent peak RSS below kube-proxy's at the same settings: not judged, no size ran both.",
		"Cold sync under 30s and one change under 20ms p99 at 50000 Services: not judged, the agent did not run at that size.",
	}
	if diff := cmp.Diff(want, scaleTargets(rows)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if got := scaleTableRow(rows[1]); !strings.Contains(got, "0 of 1 | did not finish: cold sync: timed out") {
		t.Errorf("a proxy whose every run failed: %q", got)
	}
}
