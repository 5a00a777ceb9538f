package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/svcnet-io/svcnet/internal/netlab"
)

// skipReason is why tests of simulated nodes cannot run here ("" when
// they can).
var skipReason string

// TestMain runs the whole package inside a private network and mount
// namespace: `svcnet up --nodes` creates its namespaces there, never on
// the host.
func TestMain(m *testing.M) {
	skipReason = netlab.InPrivateNetNS()
	if skipReason != "" {
		fmt.Fprintln(os.Stderr, "tests of svcnet up's simulated nodes will be skipped:", skipReason)
	}
	os.Exit(m.Run())
}

func requireNetns(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
