// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestPrefixStats(t *testing.T) {
	a, clk := newTest(t, time.Minute,
		cidr("kubernetes", time.Hour, "10.0.0.0/24", "fd00::/120"),
		cidr("copy", 0, "10.0.0.0/24"),
		cidr("nested", 0, "10.0.0.0/28"))
	kept := allocate(t, a, v4("ns/a")).Addr // upper band of the oldest: 10.0.0.17
	a.Observe(netip.MustParseAddr("10.0.0.5"), "ns/b")
	a.Observe(netip.MustParseAddr("10.0.0.6"), "ns/c")
	a.Forget(netip.MustParseAddr("10.0.0.6")) // quarantined
	clk.Step(time.Second)
	allocate(t, a, Request{Owner: "ns/d", Family: corev1.IPv6Protocol})
	if kept != netip.MustParseAddr("10.0.0.17") {
		t.Fatalf("first address %s, the test assumes 10.0.0.17", kept)
	}
	want := map[netip.Prefix]Stats{
		netip.MustParsePrefix("10.0.0.0/24"): {Size: 254, Allocated: 2, Quarantined: 1},
		netip.MustParsePrefix("10.0.0.0/28"): {Size: 14, Allocated: 1, Quarantined: 1},
		netip.MustParsePrefix("fd00::/120"):  {Size: 255, Allocated: 1},
	}
	if diff := cmp.Diff(want, a.PrefixStats()); diff != "" {
		t.Errorf("PrefixStats (-want +got):\n%s", diff)
	}
}

func TestPrefixOf(t *testing.T) {
	unusable := cidr("terminating", 0, "10.1.0.0/24")
	unusable.Usable = false
	a, _ := newTest(t, 0,
		cidr("kubernetes", time.Hour, "10.0.0.0/16", "fd00::/112"),
		cidr("nested", 0, "10.0.1.0/24"),
		unusable)
	tests := map[string]struct {
		addr string
		want string // "" when none
	}{
		"the narrowest":                        {addr: "10.0.1.7", want: "10.0.1.0/24"},
		"only the wide one holds it":           {addr: "10.0.2.7", want: "10.0.0.0/16"},
		"IPv6":                                 {addr: "fd00::5", want: "fd00::/112"},
		"outside every ServiceCIDR":            {addr: "10.9.0.1"},
		"network address is not allocatable":   {addr: "10.0.0.0"},
		"broadcast address is not allocatable": {addr: "10.0.255.255"},
		"unusable ServiceCIDRs give nothing":   {addr: "10.1.0.5"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := a.PrefixOf(netip.MustParseAddr(tc.addr))
			gotS := ""
			if ok {
				gotS = got.String()
			}
			if gotS != tc.want {
				t.Errorf("PrefixOf(%s) = %q, want %q", tc.addr, gotS, tc.want)
			}
		})
	}
}

// TestAllocationSaysItsPrefix: Allocate names the prefix it drew from,
// which the admission metrics label, without a second search.
func TestAllocationSaysItsPrefix(t *testing.T) {
	a, _ := newTest(t, 0, cidr("kubernetes", time.Hour, "10.0.0.0/16", "fd00::/112"))
	for fam, want := range map[corev1.IPFamily]string{corev1.IPv4Protocol: "10.0.0.0/16", corev1.IPv6Protocol: "fd00::/112"} {
		got, err := a.Allocate(Request{Owner: "default/web", Family: fam})
		if err != nil {
			t.Fatal(err)
		}
		if got.Prefix.String() != want || !got.Prefix.Contains(got.Addr) {
			t.Errorf("%s: %s from prefix %s, want %s", fam, got.Addr, got.Prefix, want)
		}
	}
}

func TestCandidatePrefixes(t *testing.T) {
	a, _ := newTest(t, 0,
		cidr("kubernetes", time.Hour, "10.0.0.0/16", "fd00::/112"),
		cidr("copy", time.Minute, "10.0.0.0/16"),
		cidr("tenant", 0, "10.9.0.0/24"))
	tests := map[string]struct {
		req  Request
		want []string
	}{
		"all usable of the family, oldest first, each once": {req: v4("ns/a"), want: []string{"10.0.0.0/16", "10.9.0.0/24"}},
		"IPv6":                     {req: Request{Owner: "ns/a", Family: corev1.IPv6Protocol}, want: []string{"fd00::/112"}},
		"a bound namespace":        {req: Request{Owner: "ns/a", Family: corev1.IPv4Protocol, Bound: []string{"tenant"}}, want: []string{"10.9.0.0/24"}},
		"others' exclusive ranges": {req: Request{Owner: "ns/a", Family: corev1.IPv4Protocol, Denied: []string{"tenant"}}, want: []string{"10.0.0.0/16"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, p := range a.CandidatePrefixes(tc.req) {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
