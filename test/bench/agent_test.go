// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"
	"time"
)

// TestAgentRendering: each proxy's runs as medians with ranges, the ratio
// of the agent at kube-proxy's settings to kube-proxy alone, and targets
// judged on the agent's runs: a change target on the slowest change
// where too few lie beyond a p99, the cold sync on the same-settings
// ratio, (i) left unjudged where a mode ran below 10,000 Services.
func TestAgentRendering(t *testing.T) {
	run := func(cold time.Duration, cpu, rss float64, changes ...time.Duration) agentResult {
		return agentResult{ColdSync: cold, CPU: cpu, RSSMiB: rss, Latencies: changes}
	}
	const agent, same, kp = "svcnet agent --mode=nftables", "svcnet agent --mode=nftables, GOGC=100", "kube-proxy --proxy-mode=nftables --iptables-min-sync-period=0"
	ms := time.Millisecond
	rec := &record[agentData]{Section: "ghi", Tools: map[string]string{"kube-proxy": "v1.37.1", "iptables": "iptables v1.8.9", "nft": "nftables v1.0.6"},
		Data: agentData{Repeats: 2, Scenarios: []agentScenarioRuns{
			{Name: "(g) 3 endpoint changes at 1000 Services", Services: 1000, Changes: 3, Proxies: []agentProxyRuns{
				{Proxy: agent, Mode: "nftables", Runs: []agentResult{run(time.Second, 1, 70, 10*ms, 12*ms, 60*ms), run(2*time.Second, 2, 72, 11*ms, 13*ms, 14*ms)}},
				{Proxy: same, Mode: "nftables", Compare: kp, Runs: []agentResult{run(time.Second, 1, 80, 10*ms), run(time.Second, 1, 80, 10*ms)}},
				{Proxy: kp, Mode: "nftables", Runs: []agentResult{run(4*time.Second, 4, 100, 40*ms), run(4*time.Second, 4, 100, 40*ms)}}}},
			{Name: "(h) cold sync, (i) 1 single endpoint changes at 2000 Services x 10 endpoints, iptables mode", Mode: "iptables", Services: 2000, Changes: 1,
				Proxies: []agentProxyRuns{
					{Proxy: "svcnet agent --mode=iptables", Mode: "iptables", Runs: []agentResult{run(10*time.Second, 1, 70, 100*ms)}},
					{Proxy: "svcnet agent --mode=iptables, GOGC=100", Mode: "iptables", Compare: "kube-proxy --proxy-mode=iptables --iptables-min-sync-period=0",
						Runs: []agentResult{run(10*time.Second, 1, 70, 100*ms)}},
					{Proxy: "kube-proxy --proxy-mode=iptables --iptables-min-sync-period=0", Mode: "iptables", Runs: []agentResult{run(40*time.Second, 1, 70, 100*ms)}}}},
		}}}
	hasAll(t, renderAgent(rec),
		"| (g) 3 endpoint changes at 1000 Services | svcnet agent --mode=nftables | 1.500 (1.000-2.000) | 12.5 (12.0-13.0) | 60.0 (of 6) | 1.50 (1.00-2.00) | 71 (70-72) |",
		"| (g) 3 endpoint changes at 1000 Services | **svcnet agent --mode=nftables, GOGC=100 / kube-proxy --proxy-mode=nftables --iptables-min-sync-period=0** | **0.25x** | **0.25x** | | **0.25x** | **0.80x** |",
		"- (g) nftables mode, the agent at its defaults: a change at 1000 Services within 50ms p99, judged on the slowest of the 6 changes (too few for a p99): 60.0 ms, missed.",
		"- (i) iptables mode: a change at 10000 Services within 50ms p99: not judged, this mode ran at 2000 Services.",
		"- (h) iptables mode: a cold sync at most 0.5x kube-proxy's at the same settings, at 2000 Services: 0.25x, met.",
		"Each proxy runs each scenario 2 times",
	)
}
