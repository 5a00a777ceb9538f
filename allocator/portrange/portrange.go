// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package portrange chooses nodePorts. It holds no client: the admission
// handler feeds it the nodePorts of the Services it sees, asks it for ports,
// and kube-apiserver commits them.
//
// Choice, for one Service port: the port the same Service port released
// last while it is in quarantine (a re-created Service keeps its ports);
// else a port never used since start, from the upper (dynamic) band of
// KEP-3668 first, then the lower band, skipping excluded sub-ranges; else a
// released port whose quarantine is over, oldest first; else, rather than
// fail where kube-apiserver would not, the oldest quarantined port.
package portrange

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/svcnet-io/svcnet/allocator/freeset"
	"github.com/svcnet-io/svcnet/allocator/quarantine"
)

// Range is an inclusive range of ports.
type Range struct{ First, Last int }

// ParseRange reads "30000-32767" (or a single port).
func ParseRange(s string) (Range, error) {
	lo, hi, found := strings.Cut(strings.TrimSpace(s), "-")
	if !found {
		hi = lo
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(lo))
	last, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || first < 1 || last > 65535 || first > last {
		return Range{}, fmt.Errorf("%q is not a port range like 30000-32767", s)
	}
	return Range{first, last}, nil
}

func (r Range) String() string {
	if r.First == r.Last {
		return strconv.Itoa(r.First)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// Size is the number of ports.
func (r Range) Size() int { return r.Last - r.First + 1 }

// Contains reports whether port is in r.
func (r Range) Contains(port int) bool { return port >= r.First && port <= r.Last }

// BandOffset is KEP-3668's min(max(16, size/32), 128): ports below
// First+offset form the static band; none for ranges of 16 ports or less.
func (r Range) BandOffset() int {
	size := r.Size()
	if size <= 16 {
		return 0
	}
	return min(max(16, size/32), 128)
}

// Errors; the admission handler shows their messages to users.
var (
	ErrFull       = errors.New("no free nodePort")
	ErrNotInRange = errors.New("provided port is not in the valid range")
	ErrAllocated  = errors.New("provided port is already allocated")
)

// Options tune an Allocator.
type Options struct {
	Range Range
	// Exclude are sub-ranges never handed out dynamically (e.g. the node's
	// ephemeral ports); a user may still ask for such a port explicitly.
	Exclude []Range
	// ReuseDelay is how long a released port is held before anyone else
	// gets it; 0 reuses at once.
	ReuseDelay time.Duration
	// PendingTTL is how long a port handed out at admission is held while
	// kube-apiserver has not committed it. 0: one minute.
	PendingTTL time.Duration
	Clock      clock.PassiveClock
}

// Allocation is the outcome of a request.
type Allocation struct {
	Port          int
	Sticky        bool
	Reused        bool
	QuarantineCut bool
}

type portState struct {
	owner        string
	pendingUntil time.Time
	count        int // how many Service ports use it (shared across protocols)
}

// Allocator is safe for concurrent use. Owners are Service ports,
// "namespace/name/portname" (see Owner).
type Allocator struct {
	mu      sync.Mutex
	opts    Options
	set     *freeset.Set // used or quarantined ports, index = port - First
	used    map[int]*portState
	pending []int
	held    *quarantine.List[int]
}

// Owner names a Service port for stickiness: port is the port's name, or
// its number and protocol when it has no name; "health" names the
// healthCheckNodePort.
func Owner(namespace, name, port string) string { return namespace + "/" + name + "/" + port }

// New returns an empty allocator.
func New(opts Options) (*Allocator, error) {
	if opts.Range.Size() <= 0 || opts.Range.First < 1 {
		return nil, fmt.Errorf("invalid node port range %v", opts.Range)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.PendingTTL <= 0 {
		opts.PendingTTL = time.Minute
	}
	return &Allocator{
		opts: opts,
		set:  freeset.New(uint64(opts.Range.Size())),
		used: map[int]*portState{},
		held: quarantine.New[int](opts.Range.Size()),
	}, nil
}

// Range is the allocator's range.
func (a *Allocator) Range() Range { return a.opts.Range }

// Excluded returns the excluded sub-range holding port, if any.
func (a *Allocator) Excluded(port int) (Range, bool) {
	for _, r := range a.opts.Exclude {
		if r.Contains(port) {
			return r, true
		}
	}
	return Range{}, false
}

func (a *Allocator) index(port int) (uint64, bool) {
	if !a.opts.Range.Contains(port) {
		return 0, false
	}
	return uint64(port - a.opts.Range.First), true
}

// Observe records that a committed Service uses port (kube-apiserver holds
// it). Calls nest: every Observe is matched by one Forget.
func (a *Allocator) Observe(port int, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.index(port)
	if !ok {
		return
	}
	if st, ok := a.used[port]; ok {
		if st.pendingUntil.IsZero() {
			st.count++
		} else {
			st.pendingUntil, st.count = time.Time{}, 1
		}
		st.owner = owner
		return
	}
	a.held.Remove(port)
	a.used[port] = &portState{owner: owner, count: 1}
	a.set.Add(i)
}

// Forget records that a Service port stopped using port; when no one uses
// it any more it goes into quarantine under owner. A port reserved but
// not committed is not one the caller's Service used: it was Evicted from
// that Service and handed to another, and stays with the other.
func (a *Allocator) Forget(port int, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.index(port)
	st, used := a.used[port]
	if !ok || !used || !st.pendingUntil.IsZero() {
		return
	}
	if st.count--; st.count > 0 {
		return
	}
	delete(a.used, port)
	if a.opts.ReuseDelay <= 0 {
		a.set.Remove(i)
		return
	}
	for _, dropped := range a.held.Push(port, owner, a.opts.Clock.Now()) {
		if j, ok := a.index(dropped); ok {
			a.set.Remove(j)
		}
	}
}

func (a *Allocator) expirePending(now time.Time) {
	n := 0
	for _, port := range a.pending {
		st, ok := a.used[port]
		if !ok || st.pendingUntil.IsZero() {
			n++
			continue
		}
		if st.pendingUntil.After(now) {
			break
		}
		delete(a.used, port)
		if i, ok := a.index(port); ok {
			a.set.Remove(i)
		}
		n++
	}
	a.pending = a.pending[n:]
}

func (a *Allocator) reserve(port int, owner string) {
	i, _ := a.index(port)
	a.held.Remove(port)
	a.used[port] = &portState{owner: owner, pendingUntil: a.opts.Clock.Now().Add(a.opts.PendingTTL)}
	a.set.Add(i)
	a.pending = append(a.pending, port)
}

// Allocate chooses a port for owner and, unless dryRun, holds it until
// kube-apiserver commits it or PendingTTL passes.
func (a *Allocator) Allocate(owner string, dryRun bool) (Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Clock.Now()
	a.expirePending(now)
	out, ok := a.choose(owner, now)
	if !ok {
		return Allocation{}, fmt.Errorf("%w in range %v", ErrFull, a.opts.Range)
	}
	if !dryRun {
		a.reserve(out.Port, owner)
	}
	return out, nil
}

func (a *Allocator) choose(owner string, now time.Time) (Allocation, bool) {
	for _, p := range a.held.Owned(owner) {
		if _, excluded := a.Excluded(p); !excluded {
			return Allocation{Port: p, Sticky: true}, true
		}
	}
	off := uint64(a.opts.Range.BandOffset())
	size := uint64(a.opts.Range.Size())
	for _, band := range [][2]uint64{{off, size}, {0, off}} {
		lo := band[0]
		for range len(a.opts.Exclude) + 1 {
			i, ok := a.set.NextFree(lo, band[1])
			if !ok {
				break
			}
			port := a.opts.Range.First + int(i)
			ex, excluded := a.Excluded(port)
			if !excluded {
				return Allocation{Port: port}, true
			}
			lo = uint64(ex.Last-a.opts.Range.First) + 1
		}
	}
	allowed := func(p int) bool { _, ex := a.Excluded(p); return !ex }
	if p, ok := a.held.Oldest(now.Add(-a.opts.ReuseDelay), allowed); ok {
		return Allocation{Port: p, Reused: true}, true
	}
	if p, ok := a.held.Oldest(time.Time{}, allowed); ok {
		return Allocation{Port: p, Reused: true, QuarantineCut: true}, true
	}
	return Allocation{}, false
}

// Reserve checks a port the user asked for and holds it for owner. svc is
// owner's Service ("namespace/name"): a port it already holds is fine.
func (a *Allocator) Reserve(port int, owner, svc string, dryRun bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expirePending(a.opts.Clock.Now())
	if !a.opts.Range.Contains(port) {
		return fmt.Errorf("%w; the range of valid ports is %v", ErrNotInRange, a.opts.Range)
	}
	if st, ok := a.used[port]; ok {
		if serviceOf(st.owner) != svc {
			return fmt.Errorf("%w to Service %s", ErrAllocated, serviceOf(st.owner))
		}
		return nil
	}
	if !dryRun {
		a.reserve(port, owner)
	}
	return nil
}

// Holder is the Service ("namespace/name") that committed port, if one
// did; a port only reserved at admission has no committed holder.
func (a *Allocator) Holder(port int) (svc string, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, used := a.used[port]
	if !used || !st.pendingUntil.IsZero() {
		return "", false
	}
	return serviceOf(st.owner), true
}

// Evict drops svc's committed use of port, which the caller has found
// gone from the API server (the Service deleted, or its port changed)
// before the Services' watch told the allocator: the port is free at once,
// as in kube-apiserver, whose delete releases it. The watch's late Forget
// of it is then a no-op. It reports whether svc held port.
func (a *Allocator) Evict(port int, svc string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, used := a.used[port]
	if !used || !st.pendingUntil.IsZero() || serviceOf(st.owner) != svc {
		return false
	}
	delete(a.used, port)
	if i, ok := a.index(port); ok {
		a.set.Remove(i)
	}
	return true
}

// serviceOf turns an owner "ns/name/port" into "ns/name".
func serviceOf(owner string) string {
	if i := strings.LastIndex(owner, "/"); i > 0 && strings.Count(owner, "/") >= 2 {
		return owner[:i]
	}
	return owner
}

// Release gives back a port reserved for owner and not committed.
func (a *Allocator) Release(port int, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.used[port]; ok && st.owner == owner && !st.pendingUntil.IsZero() {
		delete(a.used, port)
		if i, ok := a.index(port); ok {
			a.set.Remove(i)
		}
	}
}

// Stats describe the range.
type Stats struct {
	Size, Allocated, Quarantined int
}

// Stats returns the current usage.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Stats{Size: a.opts.Range.Size(), Allocated: len(a.used), Quarantined: a.held.Len()}
}

// ParseRanges reads a list of ranges ("32768-60999,10250").
func ParseRanges(list []string) ([]Range, error) {
	var out []Range
	for _, s := range list {
		if strings.TrimSpace(s) == "" {
			continue
		}
		r, err := ParseRange(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y Range) int { return x.First - y.First })
	return out, nil
}
