// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"

	"github.com/svcnet-io/svcnet/internal/app/manager"
)

// TestManagerFlagsRoundTrip checks that the manager options svcnet up was
// given reach `svcnet manager` whole: its flags parsed by the manager's
// own flag set give back the same options, lists and durations included,
// and options left at the manager's defaults add no flag.
func TestManagerFlagsRoundTrip(t *testing.T) {
	if got := managerFlags(manager.DefaultOptions()); len(got) != 0 {
		t.Errorf("the defaults give flags %q, want none", got)
	}
	o := DefaultOptions().Manager
	o.Controllers.Controllers = []string{"*", "-ipaddress"}
	o.Controllers.NodePort.Exclude = []string{"32000-32100", "32200-32300"}
	o.Controllers.NodePort.ReuseDelay = 90 * time.Second
	o.KubeAPIQPS = 12.5
	o.Webhook.Port = 19443
	o.LeaderElect = true

	args := managerFlags(o)
	parsed := manager.DefaultOptions()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	parsed.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("svcnet manager refuses %q: %v", args, err)
	}
	if diff := cmp.Diff(o, parsed, cmpopts.IgnoreFields(manager.Options{}, "Logger")); diff != "" {
		t.Errorf("options after %q (-want +got):\n%s", args, diff)
	}
}
