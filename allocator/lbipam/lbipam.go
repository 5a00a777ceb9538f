// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package lbipam chooses LoadBalancer IPs from pools. It is built from the
// same parts as the ClusterIP allocator (allocator/freeset: the lowest free
// address of a range in O(log64 n) at any occupancy, memory only for what is
// used), but pools are arbitrary inclusive ranges with no reserved network or
// broadcast address, tried in the order the caller gives (priority), lowest
// address first. Like allocator/ipam it holds no client: the caller commits
// a choice by creating the IPAddress object named by the address, which
// kube-apiserver accepts only once, and feeds back what exists.
package lbipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/svcnet-io/svcnet/allocator/freeset"
	"github.com/svcnet-io/svcnet/allocator/ipam"
)

// Range is an inclusive range of addresses of one family; IPv6 ranges lie
// within one /64.
type Range struct{ Start, End netip.Addr }

func (r Range) String() string {
	if r.Start == r.End {
		return r.Start.String()
	}
	return r.Start.String() + "-" + r.End.String()
}

// ParseRanges converts a pool's CIDRs and start/end pairs into ranges, with
// a clear error for each one that cannot be used.
func ParseRanges(cidrs []string, ranges [][2]string) ([]Range, error) {
	var out []Range
	var errs []error
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("cidr %q: %w", c, err))
			continue
		}
		p = p.Masked()
		if p.Addr().Is6() && p.Bits() < 64 {
			errs = append(errs, fmt.Errorf("cidr %s: IPv6 blocks must be /64 or longer", p))
			continue
		}
		out = append(out, Range{Start: p.Addr(), End: ipam.LastAddr(p)})
	}
	for _, r := range ranges {
		s, err1 := netip.ParseAddr(r[0])
		e, err2 := netip.ParseAddr(r[1])
		switch {
		case err1 != nil || err2 != nil:
			errs = append(errs, fmt.Errorf("range %s-%s: %w", r[0], r[1], errors.Join(err1, err2)))
		case s.Is4() != e.Is4():
			errs = append(errs, fmt.Errorf("range %s-%s: start and end are of different families", s, e))
		case e.Less(s):
			errs = append(errs, fmt.Errorf("range %s-%s: end is before start", s, e))
		case s.Is6() && high(s) != high(e):
			errs = append(errs, fmt.Errorf("range %s-%s: an IPv6 range must lie within one /64", s, e))
		default:
			out = append(out, Range{Start: s.Unmap(), End: e.Unmap()})
		}
	}
	return out, errors.Join(errs...)
}

// Overlaps reports whether two ranges share an address.
func (r Range) Overlaps(o Range) bool {
	return r.Start.Is4() == o.Start.Is4() && !r.End.Less(o.Start) && !o.End.Less(r.Start)
}

// OverlapsPrefix reports whether the range shares an address with p.
func (r Range) OverlapsPrefix(p netip.Prefix) bool {
	p = p.Masked()
	return r.Overlaps(Range{Start: p.Addr(), End: ipam.LastAddr(p)})
}

// Contains reports whether a is in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.Start.Is4() && !a.Less(r.Start) && !r.End.Less(a)
}

// Pool is one LoadBalancerIPPool as the allocator needs it.
type Pool struct {
	Name   string
	Ranges []Range
	// AvoidBuggyIPs skips IPv4 addresses ending in .0 or .255.
	AvoidBuggyIPs bool
}

type rangeState struct {
	Range
	high  uint64 // IPv6: the upper 64 bits
	first uint64
	size  uint64
	set   *freeset.Set // used addresses, and the avoided ones
	// avoided counts the .0/.255 addresses marked in set.
	avoided uint64
}

type poolState struct {
	Pool
	ranges []*rangeState
}

// Errors.
var (
	ErrFull       = errors.New("no free address")
	ErrNotInPool  = errors.New("not in any pool this Service may use")
	ErrAllocated  = errors.New("already allocated")
	ErrNoFamilies = errors.New("no pool of this family")
)

// Allocator is safe for concurrent use.
type Allocator struct {
	mu    sync.Mutex
	pools map[string]*poolState
	used  map[netip.Addr]string // address -> owner (namespace/name)
	owned map[string][]netip.Addr
}

// New returns an allocator without pools.
func New() *Allocator {
	return &Allocator{pools: map[string]*poolState{}, used: map[netip.Addr]string{}, owned: map[string][]netip.Addr{}}
}

func high(a netip.Addr) uint64 {
	if a.Is4() {
		return 0
	}
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8])
}

func low(a netip.Addr) uint64 {
	if a.Is4() {
		return uint64(binary.BigEndian.Uint32(a.AsSlice()))
	}
	b := a.As16()
	return binary.BigEndian.Uint64(b[8:])
}

func newRangeState(r Range, avoidBuggy bool) *rangeState {
	rs := &rangeState{Range: r, high: high(r.Start), first: low(r.Start)}
	last := low(r.End)
	if last-rs.first == math.MaxUint64 {
		rs.size = math.MaxUint64 // a whole /64, saturated
	} else {
		rs.size = last - rs.first + 1
	}
	rs.set = freeset.New(rs.size)
	if avoidBuggy && r.Start.Is4() {
		// Mark every x.x.x.0 and x.x.x.255 of the range.
		for v := rs.first &^ 0xff; v <= last; v += 256 {
			for _, b := range []uint64{v, v | 0xff} {
				if b >= rs.first && b <= last && rs.set.Add(b-rs.first) {
					rs.avoided++
				}
			}
		}
	}
	return rs
}

func (rs *rangeState) index(a netip.Addr) (uint64, bool) {
	if !rs.Contains(a) {
		return 0, false
	}
	return low(a) - rs.first, true
}

func (rs *rangeState) addr(i uint64) netip.Addr {
	v := rs.first + i
	if rs.Start.Is4() {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(v))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], rs.high)
	binary.BigEndian.PutUint64(b[8:], v)
	return netip.AddrFrom16(b)
}

func (rs *rangeState) avoidedAt(i uint64, avoidBuggy bool) bool {
	if !avoidBuggy || !rs.Start.Is4() {
		return false
	}
	last := byte(rs.first + i)
	return last == 0 || last == 255
}

// SetPool adds or replaces a pool. Addresses in use stay in use.
func (a *Allocator) SetPool(p Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := &poolState{Pool: p}
	for _, r := range p.Ranges {
		rs := newRangeState(r, p.AvoidBuggyIPs)
		for addr := range a.used {
			if i, ok := rs.index(addr); ok && !rs.avoidedAt(i, p.AvoidBuggyIPs) {
				rs.set.Add(i)
			}
		}
		ps.ranges = append(ps.ranges, rs)
	}
	a.pools[p.Name] = ps
}

// DeletePool forgets a pool; the addresses it gave stay in use.
func (a *Allocator) DeletePool(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pools, name)
}

// Observe records that addr is held by owner (its IPAddress exists).
func (a *Allocator) Observe(addr netip.Addr, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.take(addr, owner)
}

func (a *Allocator) take(addr netip.Addr, owner string) {
	if old, ok := a.used[addr]; ok {
		if old == owner {
			return
		}
		a.disown(addr, old)
	}
	a.used[addr] = owner
	a.owned[owner] = append(a.owned[owner], addr)
	for _, ps := range a.pools {
		for _, rs := range ps.ranges {
			if i, ok := rs.index(addr); ok && !rs.avoidedAt(i, ps.AvoidBuggyIPs) {
				rs.set.Add(i)
			}
		}
	}
}

// Forget records that addr was released.
func (a *Allocator) Forget(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	owner, ok := a.used[addr]
	if !ok {
		return
	}
	a.disown(addr, owner)
	delete(a.used, addr)
	for _, ps := range a.pools {
		for _, rs := range ps.ranges {
			if i, ok := rs.index(addr); ok && !rs.avoidedAt(i, ps.AvoidBuggyIPs) {
				rs.set.Remove(i)
			}
		}
	}
}

func (a *Allocator) disown(addr netip.Addr, owner string) {
	rest := slices.DeleteFunc(a.owned[owner], func(x netip.Addr) bool { return x == addr })
	if len(rest) == 0 {
		delete(a.owned, owner)
	} else {
		a.owned[owner] = rest
	}
}

// Owned returns the address of the family owner holds, if any: the
// caller's own earlier choice, which its cache may not show yet.
func (a *Allocator) Owned(owner string, ipv4 bool) (netip.Addr, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, addr := range a.owned[owner] {
		if addr.Is4() == ipv4 {
			return addr, true
		}
	}
	return netip.Addr{}, false
}

// Allocate takes the lowest free address of the family (ipv4 or not) from
// the first of pools that has one, for owner. It returns the address and
// the pool it came from.
func (a *Allocator) Allocate(ipv4 bool, owner string, pools []string) (netip.Addr, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	family := false
	for _, name := range pools {
		ps := a.pools[name]
		if ps == nil {
			continue
		}
		for _, rs := range ps.ranges {
			if rs.Start.Is4() != ipv4 {
				continue
			}
			family = true
			if i, ok := rs.set.NextFree(0, rs.size); ok {
				addr := rs.addr(i)
				a.take(addr, owner)
				return addr, name, nil
			}
		}
	}
	fam := "IPv6"
	if ipv4 {
		fam = "IPv4"
	}
	if !family {
		return netip.Addr{}, "", fmt.Errorf("%w: %s in pools %s", ErrNoFamilies, fam, list(pools))
	}
	return netip.Addr{}, "", fmt.Errorf("%w for %s in pools %s", ErrFull, fam, list(pools))
}

func list(pools []string) string {
	if len(pools) == 0 {
		return "(none matches)"
	}
	return strings.Join(pools, ", ")
}

// Reserve takes a requested address for owner: it must lie in one of pools
// (and not be an avoided .0/.255) and be free or already owner's. It
// returns the pool.
func (a *Allocator) Reserve(addr netip.Addr, owner string, pools []string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pool := ""
	for _, name := range pools {
		ps := a.pools[name]
		if ps == nil {
			continue
		}
		for _, rs := range ps.ranges {
			if i, ok := rs.index(addr); ok && !rs.avoidedAt(i, ps.AvoidBuggyIPs) {
				pool = name
				break
			}
		}
		if pool != "" {
			break
		}
	}
	if pool == "" {
		return "", fmt.Errorf("%s is %w (%s)", addr, ErrNotInPool, list(pools))
	}
	if o, ok := a.used[addr]; ok && o != owner {
		return "", fmt.Errorf("%s is %w to Service %s", addr, ErrAllocated, o)
	}
	a.take(addr, owner)
	return pool, nil
}

// PoolsOf lists the pools whose ranges contain addr, sorted.
func (a *Allocator) PoolsOf(addr netip.Addr) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for name, ps := range a.pools {
		for _, rs := range ps.ranges {
			if rs.Contains(addr) {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// Stats describe one pool.
type Stats struct {
	// Capacity is how many addresses the pool can give, saturated at
	// MaxUint64.
	Capacity  uint64
	Allocated uint64
}

// Stats returns the usage of every pool by name.
func (a *Allocator) Stats() map[string]Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Stats, len(a.pools))
	for name, ps := range a.pools {
		var s Stats
		for _, rs := range ps.ranges {
			s.Capacity = satAdd(s.Capacity, rs.size-rs.avoided)
			s.Allocated += rs.set.Len() - rs.avoided
		}
		out[name] = s
	}
	return out
}

// Capacity is how many addresses ranges give, saturated at MaxUint64.
func Capacity(ranges []Range, avoidBuggyIPs bool) uint64 {
	var c uint64
	for _, r := range ranges {
		rs := newRangeState(r, avoidBuggyIPs)
		c = satAdd(c, rs.size-rs.avoided)
	}
	return c
}

func satAdd(x, y uint64) uint64 {
	if x > math.MaxUint64-y {
		return math.MaxUint64
	}
	return x + y
}
