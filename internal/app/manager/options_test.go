// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/svcnet-io/svcnet/controllers"
)

// TestCompleteSettlesNamespacesOnce checks that the namespaces the
// manager would otherwise look up while starting come out of Complete,
// and that flags given explicitly win.
func TestCompleteSettlesNamespacesOnce(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "svcnet-system")
	o := DefaultOptions()
	c, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if !c.NeedsWebhook || c.LeaderElectNamespace != "svcnet-system" || c.Webhook.SecretNamespace != "svcnet-system" {
		t.Errorf("Complete: webhook %v, Lease namespace %q, Secret namespace %q; want true and svcnet-system for both",
			c.NeedsWebhook, c.LeaderElectNamespace, c.Webhook.SecretNamespace)
	}
	o.LeaderElectNamespace, o.Webhook.SecretNamespace = "leases", "secrets"
	o.Controllers.Controllers = []string{controllers.EndpointSliceName}
	if c, err = o.Complete(); err != nil || c.NeedsWebhook || c.LeaderElectNamespace != "leases" || c.Webhook.SecretNamespace != "secrets" {
		t.Errorf("Complete with namespaces given: %+v, %v", c, err)
	}
}

// TestCompleteNamesEveryBadFlag checks that every bad value is reported
// with its flag.
func TestCompleteNamesEveryBadFlag(t *testing.T) {
	o := DefaultOptions()
	o.MetricsBindAddress, o.HealthProbeBindAddress = "8443", "localhost"
	o.KubeAPIQPS = 0
	o.Webhook.Port = 0
	o.Webhook.CertManagement = "cert-manager"
	_, err := o.Complete()
	if err == nil {
		t.Fatal("bad flags completed")
	}
	for _, want := range []string{"--metrics-bind-address", "--health-probe-bind-address", "--kube-api-qps", "--webhook-port",
		`--webhook-cert-management "cert-manager" is not valid; valid values: self, external`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// TestKubeControllerManagerFlagNames checks that kube-controller-manager's
// flags for the controllers svcnet replaces set svcnet's options, that
// svcnet's earlier spelling still works, and that bad values are reported
// with kube-controller-manager's flag names.
func TestKubeControllerManagerFlagNames(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	err := fs.Parse([]string{
		"--endpointslice-updates-batch-period=2s",
		"--concurrent-service-endpoint-syncs=7",
		"--max-endpoints-per-slice=50",
		"--mirroring-concurrent-service-endpoint-syncs=3",
		"--mirroring-max-endpoints-per-subset=500",
		"--mirroring-endpointslice-updates-batch-period=1s",
	})
	if err != nil {
		t.Fatal(err)
	}
	es, mirror := o.Controllers.EndpointSlice, o.Controllers.EndpointSliceMirroring
	if es.BatchPeriod != 2*time.Second || es.Workers != 7 || es.MaxEndpointsPerSlice != 50 {
		t.Errorf("endpointslice options %+v", es)
	}
	if mirror.Workers != 3 || mirror.MaxEndpointsPerSubset != 500 || mirror.BatchPeriod != time.Second {
		t.Errorf("endpointslicemirroring options %+v", mirror)
	}

	o = DefaultOptions()
	fs = pflag.NewFlagSet("manager", pflag.ContinueOnError)
	var warnings strings.Builder
	fs.SetOutput(&warnings)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--endpoint-updates-batch-period=3s"}); err != nil {
		t.Fatal(err)
	}
	if o.Controllers.EndpointSlice.BatchPeriod != 3*time.Second {
		t.Errorf("--endpoint-updates-batch-period set BatchPeriod %v, want 3s", o.Controllers.EndpointSlice.BatchPeriod)
	}
	if !strings.Contains(warnings.String(), "--endpointslice-updates-batch-period") {
		t.Errorf("no deprecation warning naming the new flag: %q", warnings.String())
	}

	o = DefaultOptions()
	o.Controllers.EndpointSlice.BatchPeriod = -time.Second
	o.Controllers.EndpointSlice.Workers = -1
	o.Controllers.EndpointSliceMirroring.BatchPeriod = -time.Second
	o.Controllers.EndpointSliceMirroring.MaxEndpointsPerSubset = 1001
	o.Controllers.EndpointSliceMirroring.Workers = -2
	_, err = o.Complete()
	for _, want := range []string{"--endpointslice-updates-batch-period", "--concurrent-service-endpoint-syncs",
		"--mirroring-endpointslice-updates-batch-period", "--mirroring-max-endpoints-per-subset", "--mirroring-concurrent-service-endpoint-syncs"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
