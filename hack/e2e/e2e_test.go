// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package e2e is upstream Kubernetes' end-to-end suite as svcnet runs it:
// the framework, the [sig-network] tests (test/e2e/network and the
// Networking tests of test/e2e/common/network) and nothing svcnet does not
// judge. build.sh compiles it into e2e.test with `go test -c`; `make
// conformance` runs that binary with the ginkgo CLI against `svcnet up`.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// The tests: test/e2e imports test/e2e/common (with common/network's
	// Networking tests); named here because they are what this module is for.
	_ "k8s.io/kubernetes/test/e2e/common/network"
	_ "k8s.io/kubernetes/test/e2e/network"

	// The framework extensions upstream's e2e.test registers: the dumps on
	// failure, the metrics grabber and the check that every Node is Ready
	// after each test. Without them the suite would judge less than it
	// does in upstream's CI.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

// TestMain registers the framework's flags (-kubeconfig, -provider,
// -list-tests, ...) on the command line, as upstream's e2e.test does, and
// makes the manifests the tests read available from the binary itself.
func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown arguments: %v\n", flag.Args())
		os.Exit(2)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

// TestE2E runs the selected specs through upstream's entry point.
func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
