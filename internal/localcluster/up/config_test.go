package up

import (
	"net/netip"
	"strings"
	"testing"
)

// TestCompleteParsesTheRangesOnce checks that the range flags come out of
// Validate's checks parsed, for the session to use as they are.
func TestCompleteParsesTheRangesOnce(t *testing.T) {
	c := DefaultConfig()
	c.ServiceCIDRs, c.ClusterCIDR, c.LoadBalancerRange = "10.96.0.0/16,fd00:10:96::/112", "10.244.0.1/16", "192.168.240.7/24"
	r, err := c.complete()
	if err != nil {
		t.Fatal(err)
	}
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
	c.LoadBalancerRange, c.DNS = "", false
	if r, err := c.complete(); err != nil || r.loadBalancer.IsValid() || r.kubeDNS.IsValid() {
		t.Errorf("without a load balancer range and DNS: %+v, %v; want neither", r, err)
	}
}

// TestCompleteNamesEveryBadRange checks that bad range flags are all
// reported, each with its flag.
func TestCompleteNamesEveryBadRange(t *testing.T) {
	c := DefaultConfig()
	c.ServiceCIDRs, c.ClusterCIDR, c.LoadBalancerRange = "10.96.0.0/33", "10.244.0.0/24", "fd00::/64"
	_, err := c.complete()
	if err == nil {
		t.Fatal("bad ranges completed")
	}
	for _, want := range []string{"--service-cluster-ip-range", "--cluster-cidr", "--load-balancer-ip-range"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
