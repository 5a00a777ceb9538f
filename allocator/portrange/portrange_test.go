// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package portrange

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func newTest(t testing.TB, r string, delay time.Duration, exclude ...string) (*Allocator, *clocktesting.FakeClock) {
	t.Helper()
	rng, err := ParseRange(r)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := ParseRanges(exclude)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a, err := New(Options{Range: rng, Exclude: ex, ReuseDelay: delay, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return a, clk
}

func take(t testing.TB, a *Allocator, owner string) Allocation {
	t.Helper()
	got, err := a.Allocate(owner, false)
	if err != nil {
		t.Fatalf("Allocate(%s): %v", owner, err)
	}
	a.Observe(got.Port, owner)
	return got
}

func TestParseRangeAndBand(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Range
		offset  int
		wantErr bool
	}{
		"default":      {in: "30000-32767", want: Range{30000, 32767}, offset: 86},
		"small":        {in: "30000-30015", want: Range{30000, 30015}, offset: 0},
		"minimum band": {in: "30000-30099", want: Range{30000, 30099}, offset: 16},
		"large":        {in: "20000-32767", want: Range{20000, 32767}, offset: 128},
		"single":       {in: "30080", want: Range{30080, 30080}},
		"reversed":     {in: "32767-30000", wantErr: true},
		"garbage":      {in: "30000-abc", wantErr: true},
		"too high":     {in: "30000-70000", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseRange(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if tc.wantErr {
				return
			}
			if got != tc.want || got.BandOffset() != tc.offset {
				t.Fatalf("got %v offset %d, want %v offset %d", got, got.BandOffset(), tc.want, tc.offset)
			}
		})
	}
}

func TestUpperBandFirstThenLower(t *testing.T) {
	a, _ := newTest(t, "30000-32767", 0)
	for n := range 2768 {
		p := take(t, a, fmt.Sprintf("ns/s%d/http", n)).Port
		if n < 2768-86 && p < 30086 {
			t.Fatalf("allocation %d = %d from the static band while the upper band had room", n, p)
		}
		if n >= 2768-86 && p >= 30086 {
			t.Fatalf("allocation %d = %d: upper band should be full", n, p)
		}
	}
	if _, err := a.Allocate("ns/extra/http", false); !errors.Is(err, ErrFull) {
		t.Fatalf("full range: %v", err)
	}
}

func TestExclusion(t *testing.T) {
	a, _ := newTest(t, "30000-30099", 0, "30016-30049", "30090")
	seen := map[int]bool{}
	for n := range 100 - 34 - 1 {
		p := take(t, a, fmt.Sprintf("ns/s%d/http", n)).Port
		if (p >= 30016 && p <= 30049) || p == 30090 {
			t.Fatalf("excluded port %d handed out", p)
		}
		seen[p] = true
	}
	if _, err := a.Allocate("ns/more/http", false); !errors.Is(err, ErrFull) {
		t.Fatalf("only excluded ports left: %v", err)
	}
	if err := a.Reserve(30020, "ns/explicit/http", "ns/explicit", false); err != nil {
		t.Fatalf("explicit excluded port: %v", err)
	}
}

func TestQuarantineStickyOldestFirst(t *testing.T) {
	a, clk := newTest(t, "30000-30009", 5*time.Minute)
	ports := map[string]int{}
	for n := range 10 {
		o := fmt.Sprintf("ns/s%d/http", n)
		ports[o] = take(t, a, o).Port
	}
	a.Forget(ports["ns/s2/http"], "ns/s2/http")
	clk.Step(time.Second)
	a.Forget(ports["ns/s5/http"], "ns/s5/http")
	if got := take(t, a, "ns/s5/http"); got.Port != ports["ns/s5/http"] || !got.Sticky {
		t.Fatalf("re-created Service port got %+v, want %d back", got, ports["ns/s5/http"])
	}
	a.Forget(ports["ns/s5/http"], "ns/s5/http")
	if got := take(t, a, "ns/new/http"); got.Port != ports["ns/s2/http"] || !got.QuarantineCut {
		t.Fatalf("newcomer got %+v, want the oldest quarantined %d", got, ports["ns/s2/http"])
	}
	clk.Step(10 * time.Minute)
	if got := take(t, a, "ns/new2/http"); got.Port != ports["ns/s5/http"] || got.QuarantineCut || !got.Reused {
		t.Fatalf("after the quarantine got %+v", got)
	}
}

func TestSharedPortAndReserve(t *testing.T) {
	a, _ := newTest(t, "30000-32767", time.Minute)
	// 53/TCP and 53/UDP of one Service share a nodePort: two uses.
	a.Observe(30053, "ns/dns/dns-tcp")
	a.Observe(30053, "ns/dns/dns-udp")
	a.Forget(30053, "ns/dns/dns-udp")
	if err := a.Reserve(30053, "ns/other/x", "ns/other", false); !errors.Is(err, ErrAllocated) || err.Error() != "provided port is already allocated to Service ns/dns" {
		t.Fatalf("port still used by TCP: %v", err)
	}
	if err := a.Reserve(30053, "ns/dns/dns-tcp", "ns/dns", false); err != nil {
		t.Fatalf("the Service's own port: %v", err)
	}
	err := a.Reserve(80, "ns/web/http", "ns/web", false)
	if !errors.Is(err, ErrNotInRange) || err.Error() != "provided port is not in the valid range; the range of valid ports is 30000-32767" {
		t.Fatalf("out of range: %v", err)
	}
	if err := a.Reserve(31000, "ns/web/http", "ns/web", true); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Allocated != 1 {
		t.Fatalf("a dry run reserved: %+v", st)
	}
}

func TestPendingExpires(t *testing.T) {
	a, clk := newTest(t, "30000-30009", 0)
	got, _ := a.Allocate("ns/a/http", false)
	if again, _ := a.Allocate("ns/b/http", false); again.Port == got.Port {
		t.Fatal("a pending port was handed out twice")
	}
	clk.Step(2 * time.Minute)
	if again, _ := a.Allocate("ns/c/http", false); again.Port != got.Port {
		t.Fatalf("after the TTL got %d, want the never-committed %d", again.Port, got.Port)
	}
}

// BenchmarkAllocate: the cost must not grow with occupancy.
func BenchmarkAllocate(b *testing.B) {
	for _, fill := range []float64{0, 0.5, 0.999} {
		b.Run(fmt.Sprintf("full=%.1f%%", fill*100), func(b *testing.B) {
			a, _ := newTest(b, "30000-32767", 0)
			for n := range int(fill * 2768) {
				take(b, a, fmt.Sprintf("ns/s%d/http", n))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				got, err := a.Allocate("ns/bench/http", false)
				if err != nil {
					b.Fatal(err)
				}
				a.Observe(got.Port, "ns/bench/http")
				a.Forget(got.Port, "ns/bench/http")
			}
		})
	}
}

// TestEvictBeforeTheWatch: a Service deleted and another created at once
// with its port, before the watch delivered the delete. The port is
// refused while the allocator believes the first holds it, evicted when
// the caller found it gone, reserved for the second, and the watch's late
// Forget of the first leaves the second's reservation alone.
func TestEvictBeforeTheWatch(t *testing.T) {
	a, _ := newTest(t, "30000-30099", time.Minute)
	a.Observe(30050, Owner("ns", "first", "http"))
	if svc, ok := a.Holder(30050); !ok || svc != "ns/first" {
		t.Fatalf("Holder = %q, %v; want ns/first", svc, ok)
	}
	if err := a.Reserve(30050, Owner("ns", "second", "http"), "ns/second", false); !errors.Is(err, ErrAllocated) {
		t.Fatalf("Reserve while held = %v, want ErrAllocated", err)
	}
	if a.Evict(30050, "ns/other") {
		t.Fatal("evicted a port from a Service that does not hold it")
	}
	if !a.Evict(30050, "ns/first") {
		t.Fatal("Evict of the holder reported nothing held")
	}
	if err := a.Reserve(30050, Owner("ns", "second", "http"), "ns/second", false); err != nil {
		t.Fatalf("Reserve after Evict: %v", err)
	}
	if _, ok := a.Holder(30050); ok {
		t.Fatal("a reservation counts as a committed holder")
	}
	if a.Evict(30050, "ns/second") {
		t.Fatal("evicted a reservation")
	}
	a.Forget(30050, Owner("ns", "first", "http")) // the watch, late
	if err := a.Reserve(30050, Owner("ns", "third", "http"), "ns/third", false); !errors.Is(err, ErrAllocated) {
		t.Fatalf("the late Forget freed the second's reservation: Reserve = %v", err)
	}
	a.Observe(30050, Owner("ns", "second", "http")) // the watch: committed
	if svc, ok := a.Holder(30050); !ok || svc != "ns/second" {
		t.Fatalf("Holder = %q, %v; want ns/second", svc, ok)
	}
	a.Forget(30050, Owner("ns", "second", "http"))
	if st := a.Stats(); st.Allocated != 0 || st.Quarantined != 1 {
		t.Fatalf("after the second's delete: %+v, want the port in quarantine", st)
	}
}
