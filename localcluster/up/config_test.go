// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/svcnet-io/svcnet/controllers"
)

// TestCompleteParsesTheRangesOnce checks that the range flags come out of
// Validate's checks parsed, for the session to use as they are.
func TestCompleteParsesTheRangesOnce(t *testing.T) {
	o := DefaultOptions()
	o.ServiceCIDRs, o.ClusterCIDR, o.LoadBalancerRange = "10.96.0.0/16,fd00:10:96::/112", "10.244.0.1/16", "192.168.240.7/24"
	c, err := o.Complete(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := c.ranges
	want := ranges{
		services:     []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
		cluster:      netip.MustParsePrefix("10.244.0.0/16"),
		loadBalancer: netip.MustParsePrefix("192.168.240.0/24"),
		kubeDNS:      netip.MustParseAddr("10.96.0.10"),
	}
	if r.cluster != want.cluster || r.loadBalancer != want.loadBalancer || r.kubeDNS != want.kubeDNS ||
		len(r.services) != 2 || r.services[0] != want.services[0] || r.services[1] != want.services[1] {
		t.Errorf("complete: got %+v, want %+v", r, want)
	}
	o.LoadBalancerRange, o.DNS = "", false
	if c, err := o.Complete(nil); err != nil || c.ranges.loadBalancer.IsValid() || c.ranges.kubeDNS.IsValid() {
		t.Errorf("without a load balancer range and DNS: %+v, %v; want neither", c.ranges, err)
	}
}

// TestCompleteNamesEveryBadRange checks that bad range flags are all
// reported, each with its flag.
func TestCompleteNamesEveryBadRange(t *testing.T) {
	o := DefaultOptions()
	o.ServiceCIDRs, o.ClusterCIDR, o.LoadBalancerRange = "10.96.0.0/33", "10.244.0.0/24", "fd00::/64"
	_, err := o.Complete(nil)
	if err == nil {
		t.Fatal("bad ranges completed")
	}
	for _, want := range []string{"--service-cluster-ip-range", "--cluster-cidr", "--load-balancer-ip-range"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// TestEndpointsFreeCluster checks --endpoints-controller=false (KEP-4974):
// kube-controller-manager runs neither its Endpoints nor its mirroring
// controller in either pipeline, and svcnet's manager no mirroring.
func TestEndpointsFreeCluster(t *testing.T) {
	tests := map[string]struct {
		upstream, endpoints bool
		want                string
	}{
		"svcnet":                   {endpoints: true, want: "*,-endpointslice-controller,-endpointslice-mirroring-controller,-service-cidr-controller"},
		"svcnet, Endpoints-free":   {want: "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller,-service-cidr-controller"},
		"upstream":                 {upstream: true, endpoints: true, want: "*"},
		"upstream, Endpoints-free": {upstream: true, want: "*,-endpoints-controller,-endpointslice-mirroring-controller"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got, _ := kcmControllerList(tc.upstream, tc.endpoints); got != tc.want {
				t.Errorf("kube-controller-manager --controllers=%s, want %s", got, tc.want)
			}
		})
	}

	o := DefaultOptions()
	o.Endpoints = false
	c, err := o.Complete(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &session{cfg: c, logs: t.TempDir(), dataDir: t.TempDir()}
	enabled, err := controllers.Enabled(s.managerOptions().Controllers.Controllers)
	if err != nil {
		t.Fatal(err)
	}
	if enabled[controllers.EndpointSliceMirroringName] || !enabled[controllers.EndpointSliceName] {
		t.Errorf("svcnet manager controllers %v: want endpointslice on and endpointslicemirroring off", enabled)
	}
	if c.Manager.Controllers.Controllers[0] != "*" || len(c.Manager.Controllers.Controllers) != 1 {
		t.Errorf("managerOptions changed the config's own list: %v", c.Manager.Controllers.Controllers)
	}
}

// TestZones checks --zones: the nodes take the zones in turn, 0 leaves
// them without a zone, and out-of-range values are refused by name.
func TestZones(t *testing.T) {
	for name, tc := range map[string]struct {
		zones int
		want  []string
	}{
		"three zones, five nodes": {zones: 3, want: []string{"zone-a", "zone-b", "zone-c", "zone-a", "zone-b"}},
		"one zone":                {zones: 1, want: []string{"zone-a", "zone-a", "zone-a", "zone-a", "zone-a"}},
		"no zones":                {zones: 0, want: []string{"", "", "", "", ""}},
	} {
		t.Run(name, func(t *testing.T) {
			var got []string
			for i := 1; i <= 5; i++ {
				got = append(got, zoneOf(i, tc.zones))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("zones of nodes 1-5: got %q, want %q", got, tc.want)
			}
		})
	}
	if got := zoneOf(26, maxZones); got != "zone-z" {
		t.Errorf("node 26 of %d zones: got %q, want zone-z", maxZones, got)
	}
	for _, bad := range []int{-1, maxZones + 1} {
		o := DefaultOptions()
		o.Zones = bad
		if _, err := o.Complete(nil); err == nil || !strings.Contains(err.Error(), "--zones") {
			t.Errorf("--zones=%d: %v, want an error naming --zones", bad, err)
		}
	}
}

// TestCompleteNamesEveryBadChoice checks that the enumerations take any
// word as flags and that Complete refuses every bad one at once, naming
// its flag and the valid values.
func TestCompleteNamesEveryBadChoice(t *testing.T) {
	o := DefaultOptions()
	fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--pipeline=kind", "--proxy-mode=ipvs", "--lb-announce=ospf", "--install=kubectl"}); err != nil {
		t.Fatalf("a flag refused a word: %v", err)
	}
	_, err := o.Complete(fs)
	if err == nil {
		t.Fatal("bad choices completed")
	}
	for _, want := range []string{
		`--pipeline "kind" is not valid; valid values: svcnet, upstream`,
		`--proxy-mode "ipvs" is not valid; valid values: iptables, nftables`,
		`--lb-announce "ospf" is not valid; valid values: l2, bgp, routes`,
		`--install "kubectl" is not valid; valid values: in-process, manifests, helm`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %s: %v", want, err)
		}
	}
	if err := Run(t.Context(), Config{Options: DefaultOptions()}); err == nil || !strings.Contains(err.Error(), "Complete") {
		t.Errorf("Run of a Config not completed: %v", err)
	}
}

// --kube-proxy starts kube-proxy beside svcnet as installed from its
// manifests or chart: with svcnet in-process there is no DaemonSet of
// svcnet's to stand by, so the flag is refused.
func TestKubeProxyNeedsManifests(t *testing.T) {
	for install, ok := range map[Install]bool{InstallInProcess: false, InstallManifests: true, InstallHelm: true} {
		o := DefaultOptions()
		o.KubeProxy, o.Install = true, install
		_, err := o.Complete(nil)
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "--kube-proxy needs")) {
			t.Errorf("--kube-proxy --install=%s: %v", install, err)
		}
	}
}
