// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package lbipam

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustRanges(t *testing.T, cidrs []string, ranges ...[2]string) []Range {
	t.Helper()
	rs, err := ParseRanges(cidrs, ranges)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestParseRanges(t *testing.T) {
	tests := []struct {
		name   string
		cidrs  []string
		ranges [][2]string
		want   []string
		errs   []string
	}{
		{name: "cidr keeps network and broadcast", cidrs: []string{"192.168.10.0/30"}, want: []string{"192.168.10.0-192.168.10.3"}},
		{name: "cidr is masked", cidrs: []string{"192.168.10.7/29"}, want: []string{"192.168.10.0-192.168.10.7"}},
		{name: "single address", cidrs: []string{"192.168.10.7/32"}, want: []string{"192.168.10.7"}},
		{name: "ipv6", cidrs: []string{"2001:db8::/120"}, ranges: [][2]string{{"2001:db8:1::10", "2001:db8:1::20"}},
			want: []string{"2001:db8::-2001:db8::ff", "2001:db8:1::10-2001:db8:1::20"}},
		{name: "errors are all named", cidrs: []string{"nope", "2001:db8::/48"},
			ranges: [][2]string{{"10.0.0.9", "10.0.0.1"}, {"10.0.0.1", "2001:db8::1"}, {"2001:db8::1", "2001:db8:0:1::1"}},
			errs: []string{
				`cidr "nope": netip.ParsePrefix("nope"): no '/'`,
				"cidr 2001:db8::/48: IPv6 blocks must be /64 or longer",
				"range 10.0.0.9-10.0.0.1: end is before start",
				"range 10.0.0.1-2001:db8::1: start and end are of different families",
				"range 2001:db8::1-2001:db8:0:1::1: an IPv6 range must lie within one /64",
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ParseRanges(tc.cidrs, tc.ranges)
			var got []string
			for _, r := range rs {
				got = append(got, r.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ranges (-want +got):\n%s", diff)
			}
			var gotErrs []string
			if err != nil {
				var joined interface{ Unwrap() []error }
				if errors.As(err, &joined) {
					for _, e := range joined.Unwrap() {
						gotErrs = append(gotErrs, e.Error())
					}
				}
			}
			if diff := cmp.Diff(tc.errs, gotErrs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAllocateInPoolOrderLowestFirst(t *testing.T) {
	a := New()
	a.SetPool(Pool{Name: "low", Ranges: mustRanges(t, []string{"192.168.20.0/30"})})
	a.SetPool(Pool{Name: "high", Ranges: mustRanges(t, nil, [2]string{"192.168.10.5", "192.168.10.6"})})
	var got []string
	for i := range 7 {
		addr, pool, err := a.Allocate(true, fmt.Sprintf("ns/s%d", i), []string{"high", "low"})
		if err != nil {
			got = append(got, err.Error())
			continue
		}
		got = append(got, pool+" "+addr.String())
	}
	want := []string{
		"high 192.168.10.5", "high 192.168.10.6",
		"low 192.168.20.0", "low 192.168.20.1", "low 192.168.20.2", "low 192.168.20.3",
		"no free address for IPv4 in pools high, low",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, _, err := a.Allocate(false, "ns/v6", []string{"high", "low"}); !errors.Is(err, ErrNoFamilies) {
		t.Errorf("IPv6 from IPv4 pools: %v, want ErrNoFamilies", err)
	}
	if _, _, err := a.Allocate(true, "ns/none", nil); err == nil || err.Error() != "no pool of this family: IPv4 in pools (none matches)" {
		t.Errorf("no pools: %v", err)
	}
}

func TestAvoidBuggyIPs(t *testing.T) {
	a := New()
	a.SetPool(Pool{Name: "p", AvoidBuggyIPs: true, Ranges: mustRanges(t, nil, [2]string{"10.1.0.254", "10.1.1.1"})})
	if got := a.Stats()["p"]; got != (Stats{Capacity: 2, Allocated: 0}) {
		t.Errorf("stats %+v, want capacity 2 (10.1.0.254 and 10.1.1.1)", got)
	}
	var got []string
	for i := range 3 {
		addr, _, err := a.Allocate(true, fmt.Sprintf("ns/s%d", i), []string{"p"})
		if err != nil {
			got = append(got, "full")
			continue
		}
		got = append(got, addr.String())
	}
	if diff := cmp.Diff([]string{"10.1.0.254", "10.1.1.1", "full"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := a.Reserve(netip.MustParseAddr("10.1.0.255"), "ns/x", []string{"p"}); !errors.Is(err, ErrNotInPool) {
		t.Errorf("reserving an avoided address: %v, want ErrNotInPool", err)
	}
}

func TestReserveObserveForget(t *testing.T) {
	a := New()
	a.SetPool(Pool{Name: "p", Ranges: mustRanges(t, []string{"192.168.10.0/24", "2001:db8::/64"})})
	a.SetPool(Pool{Name: "other", Ranges: mustRanges(t, []string{"192.168.99.0/24"})})
	ip := netip.MustParseAddr("192.168.10.77")
	if pool, err := a.Reserve(ip, "ns/a", []string{"p"}); err != nil || pool != "p" {
		t.Fatalf("Reserve = %q, %v", pool, err)
	}
	if _, err := a.Reserve(ip, "ns/a", []string{"p"}); err != nil {
		t.Errorf("reserving one's own address again: %v", err)
	}
	if _, err := a.Reserve(ip, "ns/b", []string{"p"}); err == nil || err.Error() != "192.168.10.77 is already allocated to Service ns/a" {
		t.Errorf("taken: %v", err)
	}
	if _, err := a.Reserve(netip.MustParseAddr("192.168.99.1"), "ns/b", []string{"p"}); err == nil ||
		err.Error() != "192.168.99.1 is not in any pool this Service may use (p)" {
		t.Errorf("other pool: %v", err)
	}
	if got, ok := a.Owned("ns/a", true); !ok || got != ip {
		t.Errorf("Owned(ns/a) = %v, %v", got, ok)
	}
	a.Forget(ip)
	if _, ok := a.Owned("ns/a", true); ok {
		t.Error("ns/a still owns an address after Forget")
	}
	if _, err := a.Reserve(ip, "ns/b", []string{"p"}); err != nil {
		t.Errorf("after Forget: %v", err)
	}
	// Observed addresses (IPAddress objects found at start) are skipped.
	a.Observe(netip.MustParseAddr("2001:db8::"), "ns/c")
	addr, _, err := a.Allocate(false, "ns/d", []string{"p"})
	if err != nil || addr != netip.MustParseAddr("2001:db8::1") {
		t.Errorf("IPv6 allocation = %v, %v; want 2001:db8::1", addr, err)
	}
	// Replacing a pool keeps what is in use.
	a.SetPool(Pool{Name: "p", Ranges: mustRanges(t, []string{"192.168.10.64/26"})})
	if got := a.Stats()["p"]; got != (Stats{Capacity: 64, Allocated: 1}) {
		t.Errorf("stats after shrink %+v", got)
	}
	if got := a.PoolsOf(netip.MustParseAddr("192.168.10.77")); !cmp.Equal(got, []string{"p"}) {
		t.Errorf("PoolsOf = %v", got)
	}
	if got := a.Stats()["other"]; got.Capacity != 256 {
		t.Errorf("other capacity %d", got.Capacity)
	}
}

func TestOverlaps(t *testing.T) {
	r := mustRanges(t, nil, [2]string{"10.0.0.10", "10.0.0.20"})[0]
	for _, tc := range []struct {
		p    string
		want bool
	}{{"10.0.0.0/28", true}, {"10.0.0.20/32", true}, {"10.0.0.21/32", false}, {"10.0.0.0/29", false}, {"2001:db8::/64", false}} {
		if got := r.OverlapsPrefix(netip.MustParsePrefix(tc.p)); got != tc.want {
			t.Errorf("%s overlaps %s = %v, want %v", r, tc.p, got, tc.want)
		}
	}
}

func BenchmarkAllocate(b *testing.B) {
	a := New()
	rs, _ := ParseRanges([]string{"10.0.0.0/16"}, nil)
	a.SetPool(Pool{Name: "p", Ranges: rs})
	for i := range 65000 {
		if _, _, err := a.Allocate(true, fmt.Sprintf("ns/s%d", i), []string{"p"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		addr, _, err := a.Allocate(true, "ns/x", []string{"p"})
		if err != nil {
			b.Fatal(err)
		}
		a.Forget(addr)
	}
}
