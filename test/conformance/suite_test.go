// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNetworkSelection checks the network suite's selection against test
// names of v1.37.1's e2e.test -list-tests: what upstream's kind nftables
// job runs is selected, what it skips is not, nor are NetworkPolicy and
// [Serial] tests.
func TestNetworkSelection(t *testing.T) {
	su := suites[suiteNetwork]
	focus, skip := su.selection("", "")
	selected, err := focusMatcher(focus, skip)
	if err != nil {
		t.Fatal(err)
	}
	const e2e = "Kubernetes e2e suite"
	in := []string{
		"[sig-network] Services should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]",
		"[sig-network] Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort service",
		"[sig-network] Traffic Distribution should route traffic to an endpoint in the same zone when using PreferClose",
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
		"[sig-network] Networking Granular Checks: Services should function for pod-Service: http",
	}
	out := []string{
		"[sig-network] LoadBalancers [Feature:LoadBalancer] should be able to change the type and ports of a TCP service [Slow]",
		"[sig-network] Services should work after restarting kube-proxy [Disruptive]",
		"[sig-network] Netpol NetworkPolicy between server and client should enforce policy to allow traffic only from a different namespace [Feature:NetworkPolicy]",
		"[sig-network] DNS should support configurable pod resolv.conf [Serial]",
		"[sig-network] [Feature:IPv6DualStack] should have ipv4 and ipv6 internal node ip",
		"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]",
		"[sig-network] LocalhostNodePorts [Feature:LocalhostNodePorts] should not be reachable on localhost",
		"[sig-network] Services [FeatureGate:Something] [Beta] should do it",
		"[sig-storage] Volumes should store data",
	}
	for _, name := range in {
		if !selected(e2e, name) {
			t.Errorf("not selected: %s", name)
		}
	}
	for _, name := range out {
		if selected(e2e, name) {
			t.Errorf("selected: %s", name)
		}
	}
}

// TestSelectionWithTheUsers checks that the user's focus replaces the
// suite's and the user's skip is added to the suite's.
func TestSelectionWithTheUsers(t *testing.T) {
	su := suite{focus: `\[sig-network\]`, skip: `Alpha|Beta`}
	focus, skip := su.selection(`Services`, `affinity`)
	if focus != `Services` || skip != `(Alpha|Beta)|(affinity)` {
		t.Errorf("got focus %q skip %q", focus, skip)
	}
	if focus, skip := su.selection("", ""); focus != su.focus || skip != su.skip {
		t.Errorf("without the user's: focus %q skip %q", focus, skip)
	}
	if _, skip := (suite{}).selection("", "x"); skip != "x" {
		t.Errorf("a suite without a skip and the user's x: %q", skip)
	}
}

// TestUpArgs checks that the suite's nodes and zones come first and the
// user's flags after them, so that the user's win.
func TestUpArgs(t *testing.T) {
	su := suites[suiteNetwork]
	got := su.upArgs(0, []string{"--pipeline=upstream"})
	want := []string{"up", "--nodes=6", "--zones=3", "--pipeline=upstream"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if got := su.upArgs(2, nil); !slices.Contains(got, "--nodes=2") {
		t.Errorf("-nodes=2: %v", got)
	}
	if _, err := suiteNamed("nope"); err == nil || !strings.Contains(err.Error(), "conformance, dual, endpoints-free, ipv6, network") {
		t.Errorf("an unknown suite: %v", err)
	}
}

// TestJudgeKnown checks that a failure the suite expects is reported as
// expected with its reason, that its pass stays a pass, and that only the
// run-time skips upstream's jobs meet too are accepted.
func TestJudgeKnown(t *testing.T) {
	su := suite{
		expectedFailures: map[string]string{"[sig-network] X": "the simulated kubelet has no eviction"},
		acceptedSkips:    []acceptedSkip{{regexp.MustCompile(`SSH`), "needs SSH"}},
	}
	tests := map[string]struct {
		in         testResult
		wantResult string
		wantMsg    string
	}{
		"expected failure": {
			in:         testResult{name: "[sig-network] X", result: resultFailed, message: "timed out\nmore"},
			wantResult: resultExpectedFailure, wantMsg: "the simulated kubelet has no eviction (it failed: timed out)",
		},
		"expected failure that timed out": {
			in:         testResult{name: "[sig-network] X", result: "timedout", message: "A suite timeout occurred"},
			wantResult: resultExpectedFailure, wantMsg: "the simulated kubelet has no eviction (it failed: A suite timeout occurred)",
		},
		"expected failure that passed": {
			in:         testResult{name: "[sig-network] X", result: resultPassed},
			wantResult: resultPassed,
		},
		"unexpected failure": {
			in:         testResult{name: "[sig-network] Y", result: resultFailed, message: "boom"},
			wantResult: resultFailed, wantMsg: "boom",
		},
		"accepted skip": {
			in:         testResult{name: "[sig-network] Z", result: resultSkipped, message: "No SSH Key for provider skeleton"},
			wantResult: resultSkippedAsUpstream, wantMsg: "needs SSH: No SSH Key for provider skeleton",
		},
		"skip for want of nodes": {
			in:         testResult{name: "[sig-network] Z", result: resultSkipped, message: "Need at least 3 schedulable nodes for this test"},
			wantResult: resultSkipped, wantMsg: "Need at least 3 schedulable nodes for this test",
		},
		"not run": {
			in:         testResult{name: "[sig-network] X", result: resultNotRun, message: "ginkgo never started it"},
			wantResult: resultNotRun, wantMsg: "ginkgo never started it",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.in
			judgeKnown(&got, su)
			if got.result != tc.wantResult || got.message != tc.wantMsg {
				t.Errorf("got %q %q, want %q %q", got.result, got.message, tc.wantResult, tc.wantMsg)
			}
		})
	}
}

// TestSummaryExpectedFailures checks that summary.md names the suite's
// expected failures with their reasons and what each did in the run.
func TestSummaryExpectedFailures(t *testing.T) {
	r := runResults{
		suite: suite{name: suiteNetwork, source: "kind", expectedFailures: map[string]string{
			"[sig-network] A": "no eviction",
			"[sig-network] B": "no node logs",
			"[sig-network] C": "no dnsConfig",
		}},
		upArgs: []string{"up"},
		tests: []testResult{
			{name: "[sig-network] A", result: resultExpectedFailure, message: "no eviction (it failed: x)"},
			{name: "[sig-network] B", result: resultPassed},
		},
	}
	got := r.summary()
	for _, want := range []string{
		"**PASS**: 2 tests: 1 passed, 1 expected failure.",
		"| [sig-network] A | no eviction | expected failure |",
		"| [sig-network] B | no node logs | passed: take it off the list |",
		"| [sig-network] C | no dnsConfig | not selected |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}

// TestNodeCount checks the node count the runner gives e2e.test: svcnet
// up's last --nodes, the user's over the suite's.
func TestNodeCount(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{suites[suiteNetwork].upArgs(0, nil), 6},
		{suites[suiteNetwork].upArgs(0, []string{"--nodes=3"}), 3},
		{suites[suiteConformance].upArgs(0, []string{"--nodes", "4", "--proxy-mode=iptables"}), 4},
		{[]string{"up"}, 0},
	} {
		if got := nodeCount(tc.args); got != tc.want {
			t.Errorf("nodeCount(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
}

// TestForKernel checks that the SCTP tests are expected failures of the
// network suite only on a kernel without SCTP, and never of the 47.
func TestForKernel(t *testing.T) {
	network := suites[suiteNetwork]
	for _, name := range sctpTests {
		if _, ok := network.forKernel(false).expectedFailures[name]; !ok {
			t.Errorf("without SCTP, %q is not an expected failure", name)
		}
		if _, ok := network.forKernel(true).expectedFailures[name]; ok {
			t.Errorf("with SCTP, %q is an expected failure", name)
		}
	}
	if len(suites[suiteConformance].forKernel(false).expectedFailures) != 0 {
		t.Error("the conformance suite gained expected failures")
	}
	if _, ok := suites[suiteNetwork].expectedFailures[sctpTests[0]]; ok {
		t.Error("forKernel changed the suite's own list")
	}
	if why := network.acceptedSkip("test requires iptables proxy mode with route_localnet set"); why == "" {
		t.Error("the iptables-only skip of nftables mode is not accepted")
	}
	if why := network.acceptedSkip("No SSH Key for provider skeleton: 'error reading SSH key'"); why == "" {
		t.Error("upstream's skip for want of SSH keys is not accepted")
	}
	// A skip that merely mentions ssh is the test's own, and a failure.
	if why := network.acceptedSkip("sshd not running on the node"); why != "" {
		t.Errorf("a skip that mentions ssh was accepted: %s", why)
	}
}

// TestEndpointsFreeSuite checks the Endpoints-free selection: the network
// suite's, less the tests of the two controllers upstream's job turns
// off, on svcnet up without them, in iptables mode.
func TestEndpointsFreeSuite(t *testing.T) {
	su, err := suiteNamed(suiteEndpointsFree)
	if err != nil {
		t.Fatal(err)
	}
	network := suites[suiteNetwork]
	if su.focus != network.focus || su.nodes != network.nodes || su.zones != network.zones {
		t.Errorf("focus %q, %d nodes, %d zones; want the network suite's", su.focus, su.nodes, su.zones)
	}
	skip := regexp.MustCompile(su.skip)
	for name, skipped := range map[string]bool{
		"[sig-network] EndpointsController should create Endpoints for Pods matching a Service [Conformance]":                           true,
		"[sig-network] EndpointSliceMirroring should mirror a custom Endpoints resource through create update and delete [Conformance]": true,
		"[sig-network] Endpoints should test the lifecycle of an Endpoint [Conformance]":                                                false,
		"[sig-network] EndpointSlice should create Endpoints and EndpointSlices for Pods matching a Service [Conformance]":              false,
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]":                                                  false,
		"[sig-network] Networking should check kube-proxy urls [Serial]":                                                                true,
		"[sig-network] NetworkPolicy [Feature:NetworkPolicy] should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]":    true,
	} {
		if skip.MatchString(name) != skipped {
			t.Errorf("skipped(%q) = %t, want %t", name, !skipped, skipped)
		}
	}
	args := su.upArgs(0, []string{"--proxy-mode=nftables"})
	want := []string{"up", "--nodes=6", "--zones=3", "--endpoints-controller=false", "--proxy-mode=iptables", "--proxy-mode=nftables"}
	if !slices.Equal(args, want) {
		t.Errorf("upArgs = %q, want %q (the user's flags last)", args, want)
	}
	if _, ok := su.forKernel(false).expectedFailures[sctpTests[0]]; !ok {
		t.Error("without SCTP, the SCTP tests are not expected failures of the Endpoints-free suite")
	}
}

// TestFamilySuites checks the dual-stack and IPv6 selections: upstream's
// [Feature:IPv6DualStack] tests on a dual-stack svcnet up with kind's two
// nodes, and the network suite on an IPv6-only one with the IPv4-only
// tests skipped instead of the IPv6 ones.
func TestFamilySuites(t *testing.T) {
	const e2e = "Kubernetes e2e suite"
	for _, tc := range []struct {
		suite   string
		args    []string
		in, out []string
	}{
		{
			suite: suiteDual, args: []string{"up", "--nodes=2", "--zones=0", "--ip-family=dual"},
			in: []string{
				"[sig-network] [Feature:IPv6DualStack] should create service with ipv6,v4 cluster ip",
				"[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: udp",
			},
			out: []string{
				"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
				"[sig-network] [Feature:IPv6DualStack] [Serial] should do it one at a time",
				"[sig-network] [Feature:IPv6DualStack] [Feature:Networking-IPv6] should reach the internet",
			},
		},
		{
			suite: suiteIPv6, args: []string{"up", "--nodes=6", "--zones=3", "--ip-family=ipv6"},
			in: []string{
				"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
				"[sig-network] Networking Granular Checks: Services should function for pod-Service: http",
			},
			out: []string{
				"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv6] [Experimental][LinuxOnly]",
				"[sig-network] Networking should provide Internet connection for containers [Feature:Networking-IPv4]",
				"[sig-network] [Feature:IPv6DualStack] should have ipv4 and ipv6 internal node ip",
				"[sig-network] DNS should support configurable pod resolv.conf [Serial]",
			},
		},
	} {
		su, err := suiteNamed(tc.suite)
		if err != nil {
			t.Fatal(err)
		}
		selected, err := focusMatcher(su.selection("", ""))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.in {
			if !selected(e2e, name) {
				t.Errorf("%s: not selected: %s", tc.suite, name)
			}
		}
		for _, name := range tc.out {
			if selected(e2e, name) {
				t.Errorf("%s: selected: %s", tc.suite, name)
			}
		}
		if args := su.upArgs(0, nil); !slices.Equal(args, tc.args) {
			t.Errorf("%s: upArgs = %q, want %q", tc.suite, args, tc.args)
		}
	}
	const v4Only = "test requires IPv4 cluster"
	if suites[suiteIPv6].acceptedSkip(v4Only) == "" {
		t.Error("the IPv4-only tests' own skip is not accepted on the IPv6 suite")
	}
	if suites[suiteNetwork].acceptedSkip(v4Only) != "" {
		t.Error("the network suite, IPv4, accepts a skip for want of IPv4")
	}
}
