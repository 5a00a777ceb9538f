// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

func aggregated(v4, v6 int32) func(*svcnetv1alpha1.LoadBalancerAnnouncement) {
	return func(a *svcnetv1alpha1.LoadBalancerAnnouncement) {
		if v4 >= 0 {
			a.Spec.BGP.AggregationLength = ptr.To(v4)
		}
		if v6 >= 0 {
			a.Spec.BGP.AggregationLengthV6 = ptr.To(v6)
		}
	}
}

func TestRoutePrefix(t *testing.T) {
	for _, tc := range []struct {
		v4, v6 int32
		addr   string
		want   string
	}{
		{-1, -1, "192.168.240.7", "192.168.240.7/32"},
		{-1, -1, "2001:db8::7", "2001:db8::7/128"},
		{24, -1, "192.168.240.7", "192.168.240.0/24"},
		{24, 64, "2001:db8::7", "2001:db8::/64"},
		{28, -1, "192.168.240.37", "192.168.240.32/28"},
	} {
		a, err := Compile(ann("a", 1, svcnetv1alpha1.AnnouncementModeBGP, aggregated(tc.v4, tc.v6)))
		if err != nil {
			t.Fatal(err)
		}
		if got := a.RoutePrefix(netip.MustParseAddr(tc.addr)); got.String() != tc.want {
			t.Errorf("aggregation %d/%d: %s -> %s, want %s", tc.v4, tc.v6, tc.addr, got, tc.want)
		}
	}
}

// An aggregated route must lie within the pool: a CIDR shorter than the
// aggregation length, or a range that does not begin and end on its
// prefixes, makes the announcement Invalid, with the route it would
// advertise.
func TestJudgeAggregation(t *testing.T) {
	BGP := svcnetv1alpha1.AnnouncementModeBGP
	withPool := func(cidrs []string, ranges ...svcnetv1alpha1.IPRange) []*svcnetv1alpha1.LoadBalancerIPPool {
		p := pool("a")
		p.Spec.CIDRs, p.Spec.Ranges = cidrs, ranges
		return []*svcnetv1alpha1.LoadBalancerIPPool{p}
	}
	for name, tc := range map[string]struct {
		pools   []*svcnetv1alpha1.LoadBalancerIPPool
		v4, v6  int32
		reason  string
		message string
	}{
		"a /24 pool aggregated to /24":        {pools: withPool([]string{"192.168.240.0/24"}), v4: 24, v6: -1, reason: "Accepted"},
		"a /24 pool aggregated to /26":        {pools: withPool([]string{"192.168.240.0/24"}), v4: 26, v6: -1, reason: "Accepted"},
		"a /24 pool aggregated to /23":        {pools: withPool([]string{"192.168.240.0/24"}), v4: 23, v6: -1, reason: "InvalidSpec", message: "bgp.aggregationLength 23 would advertise 192.168.240.0/23, beyond pool a's 192.168.240.0-192.168.240.255"},
		"an aligned range":                    {pools: withPool(nil, svcnetv1alpha1.IPRange{Start: "10.0.0.16", End: "10.0.0.31"}), v4: 28, v6: -1, reason: "Accepted"},
		"a range ending off the prefix":       {pools: withPool(nil, svcnetv1alpha1.IPRange{Start: "10.0.0.16", End: "10.0.0.40"}), v4: 28, v6: -1, reason: "InvalidSpec", message: "would advertise 10.0.0.32/28"},
		"IPv6 aggregated within its /64 pool": {pools: withPool([]string{"2001:db8::/64"}), v4: -1, v6: 64, reason: "Accepted"},
		"IPv6 aggregated beyond it":           {pools: withPool([]string{"2001:db8::/120"}), v4: -1, v6: 112, reason: "InvalidSpec", message: "bgp.aggregationLengthV6 112"},
		"the IPv4 length leaves IPv6 alone":   {pools: withPool([]string{"2001:db8::/120"}), v4: 8, v6: -1, reason: "Accepted"},
	} {
		t.Run(name, func(t *testing.T) {
			v := Judge([]*svcnetv1alpha1.LoadBalancerAnnouncement{ann("a", 1, BGP, aggregated(tc.v4, tc.v6))}, tc.pools,
				[]*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}})["a"]
			if v.Reason != tc.reason || !strings.Contains(v.Message, tc.message) {
				t.Errorf("verdict %s %q, want %s containing %q", v.Reason, v.Message, tc.reason, tc.message)
			}
		})
	}
}
