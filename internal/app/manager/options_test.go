package manager

import (
	"strings"
	"testing"

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
	_, err := o.Complete()
	if err == nil {
		t.Fatal("bad flags completed")
	}
	for _, want := range []string{"--metrics-bind-address", "--health-probe-bind-address", "--kube-api-qps", "--webhook-port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
