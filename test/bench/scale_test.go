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
	return agentResult{coldSync: cold, rssMiB: rss, latencies: changes}
}

func TestScaleTargetsJudgeTheMedians(t *testing.T) {
	rows := []scaleRow{
		// One run of the agent above kube-proxy's, the median below it.
		{services: 1000, impl: scaleSvcnet, runs: []agentResult{run(70, time.Second, time.Millisecond), run(90, time.Second, time.Millisecond), run(71, time.Second, time.Millisecond)}},
		{services: 1000, impl: scaleKubeProxy, runs: []agentResult{run(85, 2*time.Second, time.Millisecond), run(84, 2*time.Second, time.Millisecond), run(86, 2*time.Second, time.Millisecond)}},
		// The median above kube-proxy's.
		{services: 10000, impl: scaleSvcnet, runs: []agentResult{run(280, time.Second, time.Millisecond), run(260, time.Second, time.Millisecond), run(275, time.Second, time.Millisecond)}},
		{services: 10000, impl: scaleKubeProxy, runs: []agentResult{run(273, 4*time.Second, time.Millisecond)}},
		// One change over 20 ms in one run: that run's p99, not the median's.
		{services: 50000, impl: scaleSvcnet, runs: []agentResult{run(1000, 20*time.Second, 5*time.Millisecond, 40*time.Millisecond), run(1000, 31*time.Second, 6*time.Millisecond), run(1000, 14*time.Second, 7*time.Millisecond)}},
		{services: 50000, impl: scaleKubeProxy, notRun: "above 30000 Services"},
	}
	want := []string{
		"Agent peak RSS below kube-proxy's: 1000 Services: 71 against 85 MiB, met; 10000 Services: 275 against 273 MiB, missed.",
		"Agent cold sync as a share of kube-proxy's (no target here; (h)'s is 0.3x): 0.50x at 1000, 0.25x at 10000.",
		"Cold sync at 50000 Services under 30s: 20.0 s, met.",
		"One endpoint change at 50000 Services under 20ms p99: 7.0 ms, met.",
	}
	if diff := cmp.Diff(want, scaleTargets(rows)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	rows[4].runs[2] = run(1000, 14*time.Second, 25*time.Millisecond)
	if got := scaleTargets(rows)[3]; !strings.HasSuffix(got, "25.0 ms, missed.") {
		t.Errorf("with two runs' p99 over 20 ms: %q, want missed at the median, 25.0 ms", got)
	}
}

func TestScaleTargetsWithoutTheLargestSize(t *testing.T) {
	rows := []scaleRow{
		{services: 1000, impl: scaleSvcnet, runs: []agentResult{run(70, time.Second, time.Millisecond)}},
		{services: 1000, impl: scaleKubeProxy, errs: []string{"cold sync: timed out"}},
	}
	want := []string{
		"Agent peak RSS below kube-proxy's: not judged, no size ran both.",
		"Cold sync under 30s and one change under 20ms p99 at 50000 Services: not judged, the agent did not run at that size.",
	}
	if diff := cmp.Diff(want, scaleTargets(rows)); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if got := scaleTableRow(rows[1]); !strings.Contains(got, "0 of 1 | did not finish: cold sync: timed out") {
		t.Errorf("a proxy whose every run failed: %q", got)
	}
}
