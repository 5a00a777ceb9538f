// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTest(t *testing.T, delay time.Duration, cidrs ...CIDR) (*Allocator, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(epoch)
	a := New(Options{ReuseDelay: delay, Clock: clk})
	for _, c := range cidrs {
		if err := a.SetCIDR(c); err != nil {
			t.Fatal(err)
		}
	}
	return a, clk
}

func cidr(name string, age time.Duration, prefixes ...string) CIDR {
	c := CIDR{Name: name, Created: epoch.Add(-age), Usable: true}
	for _, p := range prefixes {
		c.Prefixes = append(c.Prefixes, netip.MustParsePrefix(p))
	}
	return c
}

func v4(owner string) Request { return Request{Owner: owner, Family: corev1.IPv4Protocol} }

// commit plays kube-apiserver: the IPAddress for what was handed out exists.
func allocate(t *testing.T, a *Allocator, req Request) Allocation {
	t.Helper()
	got, err := a.Allocate(req)
	if err != nil {
		t.Fatalf("Allocate(%+v): %v", req, err)
	}
	a.Observe(got.Addr, req.Owner)
	return got
}

func TestSpan(t *testing.T) {
	tests := map[string]struct {
		prefix             string
		size, offset       uint64
		first, last        string
		network, broadcast string
	}{
		"ipv4 /16":           {prefix: "10.96.0.0/16", size: 65534, offset: 256, first: "10.96.0.1", last: "10.96.255.254", network: "10.96.0.0", broadcast: "10.96.255.255"},
		"ipv4 /24":           {prefix: "10.0.0.0/24", size: 254, offset: 16, first: "10.0.0.1", last: "10.0.0.254", network: "10.0.0.0", broadcast: "10.0.0.255"},
		"ipv4 /28 no band":   {prefix: "10.0.0.16/28", size: 14, offset: 0, first: "10.0.0.17", last: "10.0.0.30", network: "10.0.0.16", broadcast: "10.0.0.31"},
		"ipv4 /20 size/16":   {prefix: "10.0.0.0/20", size: 4094, offset: 256, first: "10.0.0.1", last: "10.0.15.254", network: "10.0.0.0"},
		"ipv4 /21 size/16":   {prefix: "10.0.0.0/21", size: 2046, offset: 128, first: "10.0.0.1", last: "10.0.7.254", network: "10.0.0.0"},
		"ipv6 /112":          {prefix: "fd00::/112", size: 65535, offset: 256, first: "fd00::1", last: "fd00::ffff", network: "fd00::"},
		"ipv6 /64":           {prefix: "fd00:1:2:3::/64", size: 1<<64 - 1, offset: 256, first: "fd00:1:2:3::1", last: "fd00:1:2:3:ffff:ffff:ffff:ffff", network: "fd00:1:2:3::"},
		"ipv6 /124 no band":  {prefix: "fd00::/124", size: 15, offset: 0, first: "fd00::1", last: "fd00::f", network: "fd00::"},
		"ipv4 /31 is empty":  {prefix: "10.0.0.0/31", size: 0, offset: 0},
		"ipv6 /128 is empty": {prefix: "fd00::/128", size: 0, offset: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := newSpan(netip.MustParsePrefix(tc.prefix))
			if err != nil {
				t.Fatal(err)
			}
			if s.size != tc.size || s.offset != tc.offset {
				t.Fatalf("size, offset = %d, %d; want %d, %d", s.size, s.offset, tc.size, tc.offset)
			}
			if tc.size == 0 {
				return
			}
			if got := s.addr(0).String(); got != tc.first {
				t.Errorf("first = %s, want %s", got, tc.first)
			}
			if got := s.addr(s.size - 1).String(); got != tc.last {
				t.Errorf("last = %s, want %s", got, tc.last)
			}
			for _, excluded := range []string{tc.network, tc.broadcast} {
				if excluded == "" {
					continue
				}
				if _, ok := s.index(netip.MustParseAddr(excluded)); ok {
					t.Errorf("%s is allocatable", excluded)
				}
			}
			if i, ok := s.index(netip.MustParseAddr(tc.last)); !ok || i != s.size-1 {
				t.Errorf("index(last) = %d, %v", i, ok)
			}
		})
	}
	if _, err := newSpan(netip.MustParsePrefix("fd00::/48")); err == nil {
		t.Error("an IPv6 /48 was accepted")
	}
}

func TestUpperBandFirstThenLower(t *testing.T) {
	a, _ := newTest(t, 0, cidr("kubernetes", 0, "10.0.0.0/24"))
	seen := map[netip.Addr]bool{}
	for n := range 254 {
		got := allocate(t, a, v4(fmt.Sprintf("ns/s%d", n))).Addr
		if seen[got] {
			t.Fatalf("%s handed out twice", got)
		}
		seen[got] = true
		inUpper := got.Compare(netip.MustParseAddr("10.0.0.17")) >= 0
		if n < 254-16 && !inUpper {
			t.Fatalf("allocation %d came from the static band (%s) while the upper band had room", n, got)
		}
		if n >= 254-16 && inUpper {
			t.Fatalf("allocation %d = %s: the upper band should be full", n, got)
		}
	}
	_, err := a.Allocate(v4("ns/one-more"))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("full range: err = %v, want ErrFull", err)
	}
	if st := a.Stats()["kubernetes"]; st.Allocated != 254 || st.Available() != 0 {
		t.Fatalf("stats of a full range: %+v", st)
	}
}

func TestQuarantineStickyAndOldestFirst(t *testing.T) {
	a, clk := newTest(t, 5*time.Minute, cidr("small", 0, "10.0.0.16/28")) // 14 addresses, no band
	addrs := map[string]netip.Addr{}
	for n := range 14 {
		owner := fmt.Sprintf("ns/s%d", n)
		addrs[owner] = allocate(t, a, v4(owner)).Addr
	}
	// Release s3 first, then s7: s3's address is the older one.
	a.Forget(addrs["ns/s3"])
	clk.Step(time.Minute)
	a.Forget(addrs["ns/s7"])

	// Re-created s7 gets its own address back while it is held.
	if got := allocate(t, a, v4("ns/s7")); got.Addr != addrs["ns/s7"] || !got.Sticky {
		t.Fatalf("re-created Service got %+v, want its old %s back", got, addrs["ns/s7"])
	}
	a.Forget(addrs["ns/s7"])

	// Within the quarantine, a newcomer on a full range cuts it, oldest first.
	got := allocate(t, a, v4("ns/new1"))
	if got.Addr != addrs["ns/s3"] || !got.QuarantineCut {
		t.Fatalf("newcomer got %+v, want %s with the quarantine cut", got, addrs["ns/s3"])
	}
	// After the quarantine, reuse is oldest-first and not flagged as a cut.
	clk.Step(5 * time.Minute)
	got = allocate(t, a, v4("ns/new2"))
	if got.Addr != addrs["ns/s7"] || !got.Reused || got.QuarantineCut {
		t.Fatalf("after the quarantine got %+v, want %s reused", got, addrs["ns/s7"])
	}
}

func TestQuarantinedAddressIsNotReusedWhileFreshOnesRemain(t *testing.T) {
	a, clk := newTest(t, 5*time.Minute, cidr("kubernetes", 0, "10.96.0.0/16"))
	first := allocate(t, a, v4("ns/a")).Addr
	a.Forget(first)
	for n := range 500 {
		if got := allocate(t, a, v4(fmt.Sprintf("ns/b%d", n))).Addr; got == first {
			t.Fatalf("quarantined %s was reused by allocation %d", first, n)
		}
		clk.Step(time.Second)
	}
}

func TestZeroDelayReusesAtOnce(t *testing.T) {
	a, _ := newTest(t, 0, cidr("kubernetes", 0, "10.0.0.16/28"))
	got := allocate(t, a, v4("ns/a")).Addr
	a.Forget(got)
	if again := allocate(t, a, v4("ns/b")).Addr; again != got {
		t.Fatalf("with no reuse delay the first free address is %s, got %s", got, again)
	}
	if a.held.Len() != 0 {
		t.Fatal("quarantine holds addresses with a zero delay")
	}
}

func TestPreferenceOrderAndUsable(t *testing.T) {
	old := cidr("kubernetes", time.Hour, "10.96.0.0/28")
	newer := cidr("extra", time.Minute, "10.100.0.0/24")
	terminating := cidr("going", 2*time.Hour, "10.200.0.0/24")
	terminating.Usable = false
	a, _ := newTest(t, 0, newer, old, terminating)
	for n := range 14 {
		got := allocate(t, a, v4(fmt.Sprintf("ns/s%d", n)))
		if got.CIDR != "kubernetes" {
			t.Fatalf("allocation %d came from %s before the oldest ServiceCIDR was full", n, got.CIDR)
		}
	}
	if got := allocate(t, a, v4("ns/overflow")); got.CIDR != "extra" {
		t.Fatalf("overflow went to %s, want the second ServiceCIDR", got.CIDR)
	}
	err := a.Reserve(netip.MustParseAddr("10.200.0.5"), v4("ns/x"))
	if !errors.Is(err, ErrNotInRange) {
		t.Fatalf("reserving in a terminating ServiceCIDR: %v", err)
	}
}

func TestBindingAndExclusive(t *testing.T) {
	general := cidr("kubernetes", time.Hour, "10.96.0.0/16")
	tenant := cidr("tenant-a", time.Minute, "10.96.255.0/24") // nested in the general range
	a, _ := newTest(t, 0, general, tenant)

	bound := Request{Owner: "a/web", Family: corev1.IPv4Protocol, Bound: []string{"tenant-a"}}
	if got := allocate(t, a, bound); got.CIDR != "tenant-a" || !netip.MustParsePrefix("10.96.255.0/24").Contains(got.Addr) {
		t.Fatalf("bound namespace got %+v", got)
	}
	// Fill the general range's upper band up to the tenant's range: nobody
	// else ever lands in it.
	other := Request{Family: corev1.IPv4Protocol, Denied: []string{"tenant-a"}}
	tenantRange := netip.MustParsePrefix("10.96.255.0/24")
	for n := range 65534 - 256 - 1 {
		other.Owner = fmt.Sprintf("b/s%d", n)
		got, err := a.Allocate(other)
		if err != nil {
			t.Fatalf("allocation %d: %v", n, err)
		}
		if tenantRange.Contains(got.Addr) {
			t.Fatalf("allocation %d for another namespace got %s, inside the exclusive range", n, got.Addr)
		}
		a.Observe(got.Addr, other.Owner)
	}
	err := a.Reserve(netip.MustParseAddr("10.96.255.77"), Request{Owner: "b/explicit", Family: corev1.IPv4Protocol, Denied: []string{"tenant-a"}})
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("explicit IP in an exclusive range: %v", err)
	}
	st := a.Stats()
	if st["tenant-a"].Allocated != 1 {
		t.Fatalf("tenant stats: %+v", st["tenant-a"])
	}
	// The general range counts the nested tenant address too.
	if st["kubernetes"].Allocated != 65534-256-1+1 {
		t.Fatalf("general stats: %+v", st["kubernetes"])
	}
}

func TestReserve(t *testing.T) {
	a, _ := newTest(t, time.Minute, cidr("kubernetes", 0, "10.96.0.0/16", "fd00::/108"))
	ip := netip.MustParseAddr("10.96.0.10")
	if err := a.Reserve(ip, v4("kube-system/dns")); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(ip, v4("kube-system/dns")); err != nil {
		t.Fatalf("the same owner again: %v", err)
	}
	err := a.Reserve(ip, v4("ns/other"))
	if !errors.Is(err, ErrAllocated) || err.Error() != "10.96.0.10 is already allocated to Service kube-system/dns" {
		t.Fatalf("taken address: %v", err)
	}
	err = a.Reserve(netip.MustParseAddr("10.97.0.1"), v4("ns/x"))
	if !errors.Is(err, ErrNotInRange) || err.Error() != "10.97.0.1 is not in any ServiceCIDR; allowed ranges: 10.96.0.0/16 (kubernetes)" {
		t.Fatalf("out of range: %v", err)
	}
	if err := a.Reserve(netip.MustParseAddr("10.96.255.255"), v4("ns/x")); !errors.Is(err, ErrNotInRange) {
		t.Fatalf("broadcast address: %v", err)
	}
	if err := a.Reserve(netip.MustParseAddr("fd00::5"), Request{Owner: "ns/x", Family: corev1.IPv6Protocol, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if _, taken := a.Owner(netip.MustParseAddr("fd00::5")); taken {
		t.Fatal("a dry run reserved the address")
	}
}

func TestPendingExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	a := New(Options{Clock: clk, PendingTTL: 30 * time.Second})
	if err := a.SetCIDR(cidr("kubernetes", 0, "10.0.0.16/28")); err != nil {
		t.Fatal(err)
	}
	never, err := a.Allocate(v4("ns/failed"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := a.Allocate(v4("ns/second")); again.Addr == never.Addr {
		t.Fatal("an address pending commit was handed out twice")
	}
	clk.Step(31 * time.Second)
	third, err := a.Allocate(v4("ns/third"))
	if err != nil {
		t.Fatal(err)
	}
	if third.Addr != never.Addr {
		t.Fatalf("after the TTL got %s, want %s, which was never committed, back", third.Addr, never.Addr)
	}
}

func TestIPv6Slash64(t *testing.T) {
	a, _ := newTest(t, 0, cidr("v6", 0, "fd00:10:96::/64"))
	req := Request{Owner: "ns/a", Family: corev1.IPv6Protocol}
	got := allocate(t, a, req)
	if got.Addr != netip.MustParseAddr("fd00:10:96::101") {
		t.Fatalf("first dynamic IPv6 address = %s, want the first of the upper band", got.Addr)
	}
	st := a.Stats()["v6"]
	if st.Size != 1<<64-1 || st.Allocated != 1 {
		t.Fatalf("stats: %+v", st)
	}
	if _, err := a.Allocate(Request{Owner: "ns/b", Family: corev1.IPv4Protocol}); !errors.Is(err, ErrFull) {
		t.Fatalf("IPv4 request with only an IPv6 range: %v", err)
	}
}

func TestDeleteCIDRAndOverlap(t *testing.T) {
	a, _ := newTest(t, 0, cidr("kubernetes", time.Hour, "10.0.0.0/24"))
	taken := allocate(t, a, v4("ns/a")).Addr
	// A second, identical ServiceCIDR sees the address as used.
	if err := a.SetCIDR(cidr("copy", 0, "10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	a.DeleteCIDR("kubernetes")
	got := allocate(t, a, v4("ns/b"))
	if got.Addr == taken || got.CIDR != "copy" {
		t.Fatalf("after deleting the first ServiceCIDR got %+v (taken: %s)", got, taken)
	}
	if diff := cmp.Diff(map[string]Stats{"copy": {Size: 254, Allocated: 2}}, a.Stats()); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
}

// BenchmarkAllocate allocates and releases one address in a /16 that is
// 0%, 50% and 99.9% full: the cost must not grow with occupancy.
func BenchmarkAllocate(b *testing.B) {
	for _, fill := range []float64{0, 0.5, 0.999} {
		b.Run(fmt.Sprintf("full=%.1f%%", fill*100), func(b *testing.B) {
			a := New(Options{})
			if err := a.SetCIDR(cidr("kubernetes", 0, "10.96.0.0/16")); err != nil {
				b.Fatal(err)
			}
			n := int(fill * 65534)
			for i := range n {
				got, err := a.Allocate(v4(fmt.Sprintf("ns/s%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				a.Observe(got.Addr, "x")
			}
			req := v4("ns/bench")
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				got, err := a.Allocate(req)
				if err != nil {
					b.Fatal(err)
				}
				a.Observe(got.Addr, req.Owner)
				a.Forget(got.Addr)
			}
		})
	}
}
