// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"
)

// TestDatapathRendering: each size's rulesets with the medians of their
// runs, a ruleset that could not run said as such, the profile table
// from the profiled runs, and the targets judged on svcnet's medians
// against the smallest size and the no-Service baseline.
func TestDatapathRendering(t *testing.T) {
	us := func(v float64) time.Duration { return time.Duration(v * 1000) }
	run := func(services int, rules string, p50, p99 float64) dpRun {
		return dpRun{Services: services, Rules: rules, TCP: dpProbeFigures{Count: 20000, P50: us(p50), P99: us(p99)},
			UDP:      dpProbeFigures{Count: 20000, P50: us(p50 * 2), P99: us(p99 * 2)},
			Parallel: dpParallelFigures{Connections: 40000, Seconds: 4, CPU: 2, SystemCPU: 1}, Profile: map[string]float64{"total": 20, "rules": 1}}
	}
	rec := &record[datapathData]{Section: "m", Tools: map[string]string{"kube-proxy": "v1.37.1"}, Data: datapathData{Repeats: 2, Sequential: 20000,
		Clients: 4, ClientsTime: 4 * time.Second, ClientsLimit: 50000, ProfileCount: 20000, Runs: []dpRun{
			run(1000, dpBaselineRules, 10, 40), run(1000, dpSvcnetRules, 12, 50), run(1000, dpBaselineRules, 12, 60), run(1000, dpSvcnetRules, 14, 70),
			run(50000, dpBaselineRules, 10, 50), run(50000, dpSvcnetRules, 13, 56), run(50000, dpBaselineRules, 10, 50), run(50000, dpSvcnetRules, 15, 64),
			{Services: 50000, Rules: "kube-proxy iptables", Err: "kube-proxy is not run above 30000 Services"},
		}}}
	got := renderDatapath(rec)
	hasAll(t, got,
		"| 1000 | svcnet nftables | 2 | - | 13.0 (12.0-14.0) | 60.0 (50.0-70.0) | 10000 (10000-10000) | 20000 (20000-20000) | 25.0 (25.0-25.0) | 26.0 (24.0-28.0) | 120.0 (100.0-140.0) |",
		"| 50000 | kube-proxy iptables | 0 of 1 | not measured: kube-proxy is not run above 30000 Services |",
		"| 50000 | svcnet nftables | 20.0 | 1.0 | 0.0 |",
		"- A new connection through svcnet's table costs the same at 50000 Services as at 1000 (connect p99 within 1.1x): 60.0 against 60.0 µs, 1.00x, met.",
		"- Connect p50 through svcnet's table within 5µs of the no-Service baseline at 50000 Services: 14.0 against 10.0 µs, met.",
		"- Connect p99 through svcnet's table within 5µs of the no-Service baseline at 50000 Services: 60.0 against 50.0 µs, missed.",
		"Each ruleset is measured 2 times at each size",
	)
	if strings.Index(got, "| 1000 |") > strings.Index(got, "| 50000 |") {
		t.Errorf("the sizes are not in order:\n%s", got)
	}
}

// TestNfacctNames finds the counters kube-proxy's rules count into, once
// each.
func TestNfacctNames(t *testing.T) {
	rules := "*filter\n-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n" +
		"-A KUBE-X -m nfacct --nfacct-name localhost_nps_accepted_pkts -j ACCEPT\n-A KUBE-Y -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\nCOMMIT\n"
	got := nfacctNames(rules)
	if len(got) != 2 || got[0] != "ct_state_invalid_dropped_pkts" || got[1] != "localhost_nps_accepted_pkts" {
		t.Errorf("nfacctNames = %q", got)
	}
}
