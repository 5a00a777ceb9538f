// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

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
	want := ranges{
		families:     []corev1.IPFamily{corev1.IPv4Protocol},
		services:     []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")},
		cluster:      []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		loadBalancer: []netip.Prefix{netip.MustParsePrefix("192.168.240.0/24")},
		kubeDNS:      netip.MustParseAddr("10.96.0.10"),
	}
	if diff := cmp.Diff(want, c.ranges, cmp.AllowUnexported(ranges{}), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("complete (-want +got):\n%s", diff)
	}
	o.LoadBalancerRange, o.DNS = "", false
	if c, err := o.Complete(nil); err != nil || len(c.ranges.loadBalancer) > 0 || c.ranges.kubeDNS.IsValid() {
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

// TestMinSyncPeriod checks --min-sync-period: unset, no node proxy is
// given one (each keeps its own default); set, the agents and kube-proxy
// get it under the one flag both take; negative, or with proxies that
// svcnet up does not start itself, it is refused.
func TestMinSyncPeriod(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		refused bool
	}{
		{args: nil, want: nil},
		{args: []string{"--min-sync-period=1s"}, want: []string{"--iptables-min-sync-period=1s"}},
		{args: []string{"--min-sync-period=0", "--pipeline=upstream"}, want: []string{"--iptables-min-sync-period=0s"}},
		{args: []string{"--min-sync-period=-1s"}, refused: true},
		{args: []string{"--min-sync-period=1s", "--install=manifests"}, refused: true},
	} {
		o := DefaultOptions()
		fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
		o.AddFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		c, err := o.Complete(fs)
		if tc.refused {
			if err == nil || !strings.Contains(err.Error(), "--min-sync-period") {
				t.Errorf("%v: %v, want refused naming --min-sync-period", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if diff := cmp.Diff(tc.want, c.proxySyncArgs()); diff != "" {
			t.Errorf("%v: node proxy flags (-want +got):\n%s", tc.args, diff)
		}
	}
	if err := (&OptionalDuration{}).Set("soon"); err == nil {
		t.Error("--min-sync-period=soon parsed")
	}
}

// TestIPFamilyRanges checks --ip-family: the range flags not given take
// the family's defaults (kind's), the network's first family is the first
// Service range's, and ranges that do not fit the families are named.
func TestIPFamilyRanges(t *testing.T) {
	p := netip.MustParsePrefix
	for name, tc := range map[string]struct {
		family   IPFamily
		args     []string
		families []corev1.IPFamily
		cluster  []netip.Prefix
		lb       []netip.Prefix
		err      string
	}{
		"ipv6 defaults": {family: IPFamilyIPv6, families: []corev1.IPFamily{corev1.IPv6Protocol},
			cluster: []netip.Prefix{p("fd00:10:244::/56")}, lb: []netip.Prefix{p("fd00:192:168:240::/120")}},
		"dual defaults, IPv4 first": {family: IPFamilyDual, families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			cluster: []netip.Prefix{p("10.244.0.0/16"), p("fd00:10:244::/56")}, lb: []netip.Prefix{p("192.168.240.0/24"), p("fd00:192:168:240::/120")}},
		"dual, IPv6 first, Pod ranges put in its order": {family: IPFamilyDual,
			args:     []string{"--service-cluster-ip-range=fd00:10:96::/112,10.96.0.0/16"},
			families: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
			cluster:  []netip.Prefix{p("fd00:10:244::/56"), p("10.244.0.0/16")}, lb: []netip.Prefix{p("192.168.240.0/24"), p("fd00:192:168:240::/120")}},
		"ipv6 with an IPv4 first Service range": {family: IPFamilyIPv6, args: []string{"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112"},
			err: "the first range must be of the network's first family"},
		"dual with one Service range": {family: IPFamilyDual, args: []string{"--service-cluster-ip-range=10.96.0.0/16"},
			err: "--ip-family=dual needs an IPv6 range"},
		"dual with one Pod range": {family: IPFamilyDual, args: []string{"--cluster-cidr=10.244.0.0/16"},
			err: "--cluster-cidr 10.244.0.0/16: give one range of each family"},
		"ipv4 with an IPv6 pool": {family: IPFamilyIPv4, args: []string{"--load-balancer-ip-range=fd00::/120"},
			err: "--load-balancer-ip-range fd00::/120: the network has no IPv6"},
		"IPv6 Pod range too small for a /64 a node": {family: IPFamilyIPv6, args: []string{"--cluster-cidr=fd00:10:244::/64"},
			err: "--cluster-cidr fd00:10:244::/64 must be a range of /63 or larger"},
		"unknown family": {family: "ipv5", err: "ip-family"},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			fs := pflag.NewFlagSet("up", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(append([]string{"--ip-family=" + string(tc.family)}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			c, err := o.Complete(fs)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			eq := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
			if diff := cmp.Diff(tc.families, c.ranges.families); diff != "" {
				t.Errorf("families (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.cluster, c.ranges.cluster, eq); diff != "" {
				t.Errorf("Pod ranges (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.lb, c.ranges.loadBalancer, eq); diff != "" {
				t.Errorf("LoadBalancer ranges (-want +got):\n%s", diff)
			}
			if first := c.apiServerAddr(); (first.Is4()) != (tc.families[0] == corev1.IPv4Protocol) {
				t.Errorf("the API server is advertised at %s, not of the network's first family %s", first, tc.families[0])
			}
		})
	}
}

// TestFabricAddresses: a host has the same number on the fabric in each
// family, its IPv6 address ending in its IPv4 address's last number.
func TestFabricAddresses(t *testing.T) {
	for host, want := range map[int][2]string{
		fabricHost:   {"172.30.0.1/24", "fc00:f853:ccd:e793::1/64"},
		nodeHost + 2: {"172.30.0.12/24", "fc00:f853:ccd:e793::12/64"},
		routerHost:   {"172.30.0.254/24", "fc00:f853:ccd:e793::254/64"},
	} {
		for i, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
			if got := onFabric(f, host).String(); got != want[i] {
				t.Errorf("host %d, %s: %s, want %s", host, f, got, want[i])
			}
		}
	}
}
