// Package kernel holds the tests that prove the node agent with real
// packets: a real API server, svcnet's EndpointSlice controller, agents
// programming real iptables in simulated nodes (network namespaces), Pods
// as network namespaces with HTTP servers, and clients making real
// connections. The whole test binary runs in a private network namespace.
package kernel

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/internal/netlab"
)

var skipReason string

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	skipReason = netlab.InPrivateNetNS()
	if skipReason != "" {
		fmt.Fprintln(os.Stderr, "kernel tests will be skipped:", skipReason)
	}
	os.Exit(m.Run())
}

func requireKernel(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
