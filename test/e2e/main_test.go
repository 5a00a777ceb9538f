// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"testing"

	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

// privateNS is where the whole test binary runs: its own network and
// mount namespaces.
var privateNS *privatens.Env

// TestMain runs the whole package inside a private network and mount
// namespace: `svcnet up --nodes` creates its namespaces there, never on
// the host.
func TestMain(m *testing.M) {
	privateNS = privatens.Enter()
	privateNS.Report("tests of svcnet up's simulated nodes")
	os.Exit(m.Run())
}

func requireNetns(t *testing.T) {
	t.Helper()
	privateNS.Require(t)
}
