// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// suite is a selection of upstream's e2e tests: which tests, what
// `svcnet up` must give them, and what the runner knows of them before
// they run.
type suite struct {
	name string
	// source says where the selection comes from, for summary.md.
	source string
	// focus and skip are ginkgo's --focus and --skip.
	focus, skip string
	// nodes and zones are the svcnet up --nodes and --zones the tests
	// need, so that none skips itself for want of them.
	nodes, zones int
	// upFlags are the other svcnet up flags the selection is made for
	// (the user's come after them and win).
	upFlags []string
	// sctp: the selection holds the SCTP tests (forKernel).
	sctp bool
	// expectedFailures are tests that cannot pass on svcnet up because a
	// simulated node is not a real one, by name, with the reason. Their
	// failure is reported as such and is no regression; their pass is
	// reported too, so that the list shrinks.
	expectedFailures map[string]string
	// acceptedSkips are the reasons a test may skip itself at run time
	// that upstream's jobs meet too (a cloud provider, SSH keys); any
	// other skip is a failure (a test must run).
	acceptedSkips []acceptedSkip
}

// acceptedSkip is a run-time skip message upstream's jobs see too.
type acceptedSkip struct {
	message *regexp.Regexp
	why     string
}

// Suites (-suite, make conformance SUITE=...).
const (
	suiteConformance   = "conformance"
	suiteNetwork       = "network"
	suiteEndpointsFree = "endpoints-free"
	suiteDual          = "dual"
	suiteIPv6          = "ipv6"
)

// suites are the selections the runner knows.
var suites = map[string]suite{
	suiteConformance: {
		name:   suiteConformance,
		source: "the [sig-network] tests of the conformance profile",
		focus:  `\[sig-network\].*\[Conformance\]`,
		nodes:  2,
		zones:  3,
	},
	suiteNetwork:       networkSuite,
	suiteEndpointsFree: endpointsFree(networkSuite),
	suiteDual:          dualSuite,
	suiteIPv6:          ipv6(networkSuite),
}

// dualSuite is upstream's dual-stack tests ([Feature:IPv6DualStack]) as
// its dual-stack kind job selects them, on a dual-stack svcnet up with
// kind's two nodes.
var dualSuite = suite{
	name: suiteDual,
	source: "upstream's dual-stack kind CI (kubernetes/test-infra config/jobs/kubernetes/sig-network/sig-network-kind.yaml, " +
		"ci-kubernetes-kind-network-dual: IP_FAMILY=dual, PARALLEL=true, so kind's e2e-k8s.sh adds \\[Serial\\]), " +
		"its [sig-network] [Feature:IPv6DualStack] tests",
	focus:   `\[sig-network\].*\[Feature:IPv6DualStack\]`,
	skip:    `\[Serial\]|Alpha|Beta|Disruptive|Flaky|Networking-IPv6|LoadBalancer`,
	nodes:   2,
	upFlags: []string{"--ip-family=dual"},
	sctp:    true,
}

// ipv6 is the network suite on an IPv6-only svcnet up, as upstream's
// ci-kubernetes-kind-network-nftables-ipv6 runs it: the IPv4-only tests
// (Networking-IPv4) skipped instead of the IPv6 ones.
func ipv6(network suite) suite {
	s := network
	s.name = suiteIPv6
	s.source = "upstream's IPv6 kind CI (kubernetes/test-infra config/jobs/kubernetes/sig-network/sig-network-kind.yaml, " +
		"ci-kubernetes-kind-network-nftables-ipv6: IP_FAMILY=ipv6, nftables, skipping Networking-IPv4 and IPv6DualStack), " +
		"with the network suite's [sig-network] focus and other skips"
	s.skip = strings.Replace(network.skip, "Networking-IPv6", "Networking-IPv4", 1)
	s.upFlags = []string{"--ip-family=ipv6"}
	s.acceptedSkips = append(slices.Clone(network.acceptedSkips), acceptedSkip{
		regexp.MustCompile(`test requires IPv4 cluster`),
		"an IPv4-only test (localhost nodePorts have no IPv6 form), which skips itself on upstream's IPv6 jobs too",
	})
	return s
}

// networkSuite is upstream's [sig-network] suite as its kind-based
// network CI selects it.
var networkSuite = suite{
	name: suiteNetwork,
	source: "upstream's kind-based network CI (kubernetes/test-infra config/jobs/kubernetes/sig-network/sig-network-kind.yaml, " +
		"ci-kubernetes-kind-network-nftables: PARALLEL=true, so kind's e2e-k8s.sh adds \\[Serial\\]; NetworkPolicy left out as " +
		"ci-kubernetes-kind-network-parallel does), focused on [sig-network]",
	focus: `\[sig-network\]`,
	skip:  networkSkip,
	// Traffic Distribution's multi-node tests want 3 zones of 2
	// schedulable nodes each; several Services tests want 3 nodes.
	nodes:            6,
	zones:            3,
	expectedFailures: networkExpectedFailures,
	acceptedSkips: []acceptedSkip{
		{regexp.MustCompile(`No SSH Key for provider`), "needs SSH to the nodes, which kind's jobs do not give either"},
		{regexp.MustCompile(`Only supported for providers`), "needs a cloud provider, as on kind"},
		{regexp.MustCompile(`until DialFromNode supports SCTP`), "upstream's own skip until its framework dials SCTP from a node (kubernetes#96482)"},
		{regexp.MustCompile(`requires iptables proxy mode`), "a test of kube-proxy's iptables mode, skipped in nftables mode as on upstream's nftables jobs"},
	},
	sctp: true,
}

// endpointsFree is the network suite on the Endpoints-free cluster of
// KEP-4974, as upstream's ci-kubernetes-kind-network-deprecate-endpoints
// runs it (kubernetes/test-infra sig-network-kind.yaml and
// experiment/kind-noendpoints-e2e.sh): kube-controller-manager without
// its endpoints-controller and endpointslice-mirroring-controller, so
// svcnet up runs with --endpoints-controller=false (svcnet's mirroring
// controller off too); kube-proxy's iptables mode, kind's default; and
// the job's skip of the tests that need those controllers, which carry
// EndpointsController or EndpointSliceMirroring in their names. The job's
// label filter, (Conformance || sig-network) && !Disruptive && !Flaky,
// also holds other SIGs' conformance tests (the kubelet's, the
// scheduler's), which are not svcnet's: the suite keeps the network
// suite's [sig-network] focus and skips.
func endpointsFree(network suite) suite {
	s := network
	s.name = suiteEndpointsFree
	s.source = "upstream's Endpoints-free network CI (kubernetes/test-infra config/jobs/kubernetes/sig-network/sig-network-kind.yaml, " +
		"ci-kubernetes-kind-network-deprecate-endpoints: kube-controller-manager --controllers=-endpoints-controller," +
		"-endpointslice-mirroring-controller,*, iptables mode), with the network suite's [sig-network] focus and skips"
	s.skip = network.skip + "|" + endpointsControllerSkip
	s.upFlags = []string{"--endpoints-controller=false", "--proxy-mode=iptables"}
	return s
}

// endpointsControllerSkip is what the Endpoints-free job adds to its
// skip: the tests of the two controllers it turns off.
const endpointsControllerSkip = `EndpointsController|EndpointSliceMirroring`

// networkSkip is what ci-kubernetes-kind-network-nftables skips, with
// [Serial] as kind's e2e-k8s.sh adds it for PARALLEL=true, and
// NetworkPolicy (the CNI's, not the Service proxy's; svcnet up's
// simulated network enforces none) as ci-kubernetes-kind-network-parallel
// and the multizone jobs skip it:
//
//   - Alpha, Beta: tests of feature gates off by default;
//   - LoadBalancer: needs a cloud's load balancers;
//   - Disruptive, Flaky: restart components or fail on their own;
//   - IPv6DualStack, Networking-IPv6: the cluster is IPv4;
//   - Internet.connection: needs the internet;
//   - LocalhostNodePorts: kube-proxy's iptables-only localhost NodePorts.
var networkSkip = strings.Join([]string{
	`\[Serial\]`, `Alpha`, `Beta`, `LoadBalancer`, `Disruptive`, `Flaky`,
	`IPv6DualStack`, `Networking-IPv6`, `Internet.connection`, `LocalhostNodePorts`,
	`NetworkPolicy`,
}, "|")

// networkExpectedFailures are the tests of the network suite that a
// simulated node cannot pass, with the reason (docs/conformance.md).
// Those found so far were made right in the node simulator (node logs,
// readiness gates, inter-Pod anti-affinity, local storage eviction, a
// terminating Pod's readiness, the downward API's addresses) and in its
// images, but for one that needs a program Debian does not ship.
var networkExpectedFailures = map[string]string{
	"[sig-network] Networking IPerf2 [Feature:Networking-Performance] should run iperf2": "the test parses the 17-field enhanced CSV " +
		"report of iperf 2.2 or later (agnhost's Alpine image); svcnet up's agnhost has Debian bookworm's iperf 2.1.8, whose report " +
		"has 9 fields; the traffic itself flows (the report shows the bytes through the Service)",
}

// sctpTests are the tests of SCTP traffic of the network and dual-stack
// suites.
var sctpTests = []string{
	"[sig-network] [Feature:IPv6DualStack] Granular Checks: Services Secondary IP Family [LinuxOnly] should function for pod-Service: sctp [Feature:SCTPConnectivity]",
	"[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: sctp [LinuxOnly] [Feature:SCTPConnectivity]",
	"[sig-network] Networking Granular Checks: Services should function for endpoint-Service: sctp [Feature:SCTPConnectivity]",
	"[sig-network] Networking Granular Checks: Services should function for pod-Service: sctp [Feature:SCTPConnectivity]",
}

// forKernel adds to the expected failures the tests this machine's kernel
// cannot run on either pipeline, found when the run starts: SCTP where
// the kernel has no SCTP (its socket() answers EPROTONOSUPPORT).
func (s suite) forKernel(hasSCTP bool) suite {
	if !s.sctp || hasSCTP {
		return s
	}
	failures := map[string]string{}
	maps.Copy(failures, s.expectedFailures)
	s.expectedFailures = failures
	for _, name := range sctpTests {
		s.expectedFailures[name] = "this machine's kernel has no SCTP (socket: protocol not supported), so no Pod can serve it; not svcnet's"
	}
	return s
}

// kernelHasSCTP tells whether this kernel opens SCTP sockets.
func kernelHasSCTP() bool {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, syscall.IPPROTO_SCTP)
	if err != nil {
		return !errors.Is(err, syscall.EPROTONOSUPPORT)
	}
	_ = syscall.Close(fd)
	return true
}

// suiteNamed returns the suite called name.
func suiteNamed(name string) (suite, error) {
	s, ok := suites[name]
	if !ok {
		return suite{}, fmt.Errorf("-suite %q is not known; known: %s", name, strings.Join(slices.Sorted(maps.Keys(suites)), ", "))
	}
	return s, nil
}

// selection is the ginkgo --focus and --skip of a run: the suite's, or
// the user's focus instead of the suite's and the user's skip beside the
// suite's (ginkgo ORs its --skip regexps, so the user narrows the suite).
func (s suite) selection(userFocus, userSkip string) (focus, skip string) {
	focus = s.focus
	if userFocus != "" {
		focus = userFocus
	}
	skip = s.skip
	switch {
	case skip == "":
		skip = userSkip
	case userSkip != "":
		skip = "(" + skip + ")|(" + userSkip + ")"
	}
	return focus, skip
}

// upArgs are the svcnet up flags for the suite; the user's come last and
// win (--nodes, --zones).
func (s suite) upArgs(nodes int, user []string) []string {
	if nodes == 0 {
		nodes = s.nodes
	}
	args := append([]string{"up", fmt.Sprintf("--nodes=%d", nodes), fmt.Sprintf("--zones=%d", s.zones)}, s.upFlags...)
	return append(args, user...)
}

// nodeCount is the node count svcnet up runs with: its last --nodes in
// args (the user's win over the suite's), in either spelling.
func nodeCount(args []string) int {
	n := 0
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--nodes=")
		if !ok && a == "--nodes" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			if parsed, err := strconv.Atoi(v); err == nil {
				n = parsed
			}
		}
	}
	return n
}

// acceptedSkip tells why a run-time skip with message is one upstream's
// jobs meet too; "" when it is not.
func (s suite) acceptedSkip(message string) string {
	for _, a := range s.acceptedSkips {
		if a.message.MatchString(message) {
			return a.why
		}
	}
	return ""
}
