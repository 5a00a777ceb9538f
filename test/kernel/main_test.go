// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package kernel holds the tests that prove the node agent with real
// packets: a real API server, svcnet's EndpointSlice controller, agents
// programming real iptables in simulated nodes (network namespaces), Pods
// as network namespaces with HTTP servers, and clients making real
// connections. The whole test binary runs in a private network namespace.
package kernel

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

// privateNS is where the whole test binary runs: its own network and
// mount namespaces.
var privateNS *privatens.Env

func TestMain(m *testing.M) {
	// The BGP tests run agents as processes of this binary, to kill them.
	switch os.Getenv(agentProcessEnv) {
	case agentProcess:
		os.Exit(runAgentProcess(agent.DefaultOptions(), os.Args[1:]))
	case kubeProxyProcess:
		os.Exit(runAgentProcess(agent.KubeProxyOptions(), os.Args[1:]))
	}
	ctrl.SetLogger(logr.Discard())
	privateNS = privatens.Enter()
	privateNS.Report("kernel tests")
	os.Exit(m.Run())
}

// requireKernel skips the test where namespaces cannot be made, and fails
// it instead when CI requires the kernel suites.
func requireKernel(t *testing.T) {
	t.Helper()
	privateNS.Require(t)
}
