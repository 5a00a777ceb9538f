// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/svcnet-io/svcnet/allocator/freeset"
	"github.com/svcnet-io/svcnet/allocator/quarantine"
)

// CIDR is one ServiceCIDR as the allocator needs it.
type CIDR struct {
	Name     string
	Prefixes []netip.Prefix
	// Created orders the ServiceCIDRs: the oldest is preferred.
	Created time.Time
	// Usable is Ready and not being deleted: only usable ServiceCIDRs give
	// new addresses.
	Usable bool
}

// Request asks for one address of one family.
type Request struct {
	// Owner is the Service's namespace/name.
	Owner  string
	Family corev1.IPFamily
	// Bound are the ServiceCIDRs bound to the Service's namespace. When one
	// of them is usable and of Family, only they are used.
	Bound []string
	// Denied are ServiceCIDRs bound exclusively to other namespaces: none of
	// their addresses is given, even where another ServiceCIDR covers them.
	Denied []string
	// DryRun chooses without reserving.
	DryRun bool
}

// Allocation is the outcome of a request.
type Allocation struct {
	Addr netip.Addr
	// CIDR is the ServiceCIDR it came from, Prefix that ServiceCIDR's
	// prefix holding it.
	CIDR   string
	Prefix netip.Prefix
	// Sticky: the owner's own address, given back from quarantine.
	Sticky bool
	// Reused: a released address whose quarantine was over.
	Reused bool
	// QuarantineCut: the ranges were full but for addresses in quarantine,
	// and one of them was handed out before its time.
	QuarantineCut bool
}

// Errors. Their messages are shown to users by the admission handler.
var (
	ErrFull       = errors.New("no free address")
	ErrNotInRange = errors.New("not in any ServiceCIDR")
	ErrAllocated  = errors.New("already allocated")
	ErrDenied     = errors.New("reserved for other namespaces")
)

// Options tune an Allocator.
type Options struct {
	// ReuseDelay is how long a released address is held before anyone else
	// gets it; 0 reuses at once.
	ReuseDelay time.Duration
	// PendingTTL is how long an address handed out at admission is held for
	// its Service while kube-apiserver has not committed it.
	PendingTTL time.Duration
	// MaxQuarantined bounds the memory of the quarantine; beyond it the
	// oldest entries are freed. 0: 1<<16.
	MaxQuarantined int
	Clock          clock.PassiveClock
}

type prefixState struct {
	span
	set  *freeset.Set // used or quarantined addresses
	refs int          // ServiceCIDRs naming this prefix
}

type addrState struct {
	owner        string
	pendingUntil time.Time // zero once kube-apiserver committed it
}

// Allocator is safe for concurrent use.
type Allocator struct {
	mu       sync.Mutex
	opts     Options
	cidrs    map[string]CIDR
	prefixes map[netip.Prefix]*prefixState
	used     map[netip.Addr]*addrState
	pending  []netip.Addr // in reservation order, to expire them
	held     *quarantine.List[netip.Addr]
}

// New returns an allocator with no ServiceCIDR.
func New(opts Options) *Allocator {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxQuarantined <= 0 {
		opts.MaxQuarantined = 1 << 16
	}
	if opts.PendingTTL <= 0 {
		opts.PendingTTL = time.Minute
	}
	return &Allocator{
		opts:     opts,
		cidrs:    map[string]CIDR{},
		prefixes: map[netip.Prefix]*prefixState{},
		used:     map[netip.Addr]*addrState{},
		held:     quarantine.New[netip.Addr](opts.MaxQuarantined),
	}
}

// SetCIDR adds or updates a ServiceCIDR. A prefix that cannot be allocated
// from (an IPv6 prefix shorter than /64) is an error; the others are kept.
func (a *Allocator) SetCIDR(c CIDR) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	valid := c.Prefixes[:0:0]
	for _, p := range c.Prefixes {
		if _, err := newSpan(p); err != nil {
			errs = append(errs, fmt.Errorf("ServiceCIDR %s: %w", c.Name, err))
			continue
		}
		valid = append(valid, p.Masked())
	}
	c.Prefixes = valid
	if old, ok := a.cidrs[c.Name]; ok {
		a.unref(old.Prefixes)
	}
	a.cidrs[c.Name] = c
	for _, p := range c.Prefixes {
		a.ref(p)
	}
	return errors.Join(errs...)
}

// DeleteCIDR forgets a ServiceCIDR.
func (a *Allocator) DeleteCIDR(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.cidrs[name]; ok {
		a.unref(old.Prefixes)
		delete(a.cidrs, name)
	}
}

func (a *Allocator) ref(p netip.Prefix) {
	if ps, ok := a.prefixes[p]; ok {
		ps.refs++
		return
	}
	s, _ := newSpan(p) // validated by SetCIDR
	ps := &prefixState{span: s, set: freeset.New(s.size), refs: 1}
	for addr := range a.used {
		if i, ok := s.index(addr); ok {
			ps.set.Add(i)
		}
	}
	a.held.Each(func(e quarantine.Entry[netip.Addr]) {
		if i, ok := s.index(e.Value); ok {
			ps.set.Add(i)
		}
	})
	a.prefixes[p] = ps
}

func (a *Allocator) unref(ps []netip.Prefix) {
	for _, p := range ps {
		if st, ok := a.prefixes[p]; ok {
			if st.refs--; st.refs == 0 {
				delete(a.prefixes, p)
			}
		}
	}
}

// mark and unmark keep every prefix that contains addr in step.
func (a *Allocator) mark(addr netip.Addr) {
	for _, ps := range a.prefixes {
		if i, ok := ps.index(addr); ok {
			ps.set.Add(i)
		}
	}
}

func (a *Allocator) unmark(addr netip.Addr) {
	for _, ps := range a.prefixes {
		if i, ok := ps.index(addr); ok {
			ps.set.Remove(i)
		}
	}
}

// Observe records that kube-apiserver committed addr to owner (an
// IPAddress object exists).
func (a *Allocator) Observe(addr netip.Addr, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.used[addr]; ok {
		st.owner, st.pendingUntil = owner, time.Time{}
		return
	}
	a.held.Remove(addr)
	a.used[addr] = &addrState{owner: owner}
	a.mark(addr)
}

// Forget records that addr was released (its IPAddress was deleted); it
// goes into quarantine under its last owner.
func (a *Allocator) Forget(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.used[addr]
	if !ok {
		return
	}
	delete(a.used, addr)
	if a.opts.ReuseDelay <= 0 {
		a.unmark(addr)
		return
	}
	for _, dropped := range a.held.Push(addr, st.owner, a.opts.Clock.Now()) {
		a.unmark(dropped)
	}
}

// expirePending frees addresses handed out at admission that kube-apiserver
// never committed (the request failed after the webhook, or was retried).
func (a *Allocator) expirePending(now time.Time) {
	n := 0
	for _, addr := range a.pending {
		st, ok := a.used[addr]
		if !ok || st.pendingUntil.IsZero() {
			n++
			continue
		}
		if st.pendingUntil.After(now) {
			break
		}
		delete(a.used, addr)
		a.unmark(addr)
		n++
	}
	a.pending = a.pending[n:]
}

func (a *Allocator) reserve(addr netip.Addr, owner string) {
	now := a.opts.Clock.Now()
	a.held.Remove(addr) // still marked in every prefix
	a.used[addr] = &addrState{owner: owner, pendingUntil: now.Add(a.opts.PendingTTL)}
	a.mark(addr)
	a.pending = append(a.pending, addr)
}

// candidates returns the ServiceCIDRs a request may allocate from, in
// preference order, and the prefixes it must avoid.
func (a *Allocator) candidates(req Request) ([]CIDR, []netip.Prefix) {
	var usable, bound []CIDR
	var denied []netip.Prefix
	for _, c := range a.cidrs {
		fam := c.family(req.Family)
		if slices.Contains(req.Denied, c.Name) {
			denied = append(denied, fam...)
			continue
		}
		if !c.Usable || len(fam) == 0 {
			continue
		}
		usable = append(usable, c)
		if slices.Contains(req.Bound, c.Name) {
			bound = append(bound, c)
		}
	}
	if len(bound) > 0 {
		usable = bound
	}
	slices.SortFunc(usable, func(x, y CIDR) int {
		return cmp.Or(x.Created.Compare(y.Created), strings.Compare(x.Name, y.Name))
	})
	return usable, denied
}

func (c CIDR) family(f corev1.IPFamily) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.Prefixes {
		if p.Addr().Is4() == (f == corev1.IPv4Protocol) {
			out = append(out, p)
		}
	}
	return out
}

func inAny(addr netip.Addr, ps []netip.Prefix) (netip.Prefix, bool) {
	for _, p := range ps {
		if p.Contains(addr) {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// Allocate chooses an address for req (see the package documentation for
// the order) and, unless req.DryRun, holds it for req.Owner until
// kube-apiserver commits it or Options.PendingTTL passes.
func (a *Allocator) Allocate(req Request) (Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Clock.Now()
	a.expirePending(now)
	cidrs, denied := a.candidates(req)
	if len(cidrs) == 0 {
		return Allocation{}, fmt.Errorf("%w: no usable ServiceCIDR for %s", ErrFull, req.Family)
	}
	eligible := func(addr netip.Addr) (string, netip.Prefix, bool) {
		if _, bad := inAny(addr, denied); bad {
			return "", netip.Prefix{}, false
		}
		for _, c := range cidrs {
			if p, ok := inAny(addr, c.family(req.Family)); ok {
				return c.Name, p, true
			}
		}
		return "", netip.Prefix{}, false
	}
	var out Allocation
	found := false
	for _, addr := range a.held.Owned(req.Owner) {
		if name, p, ok := eligible(addr); ok {
			out, found = Allocation{Addr: addr, CIDR: name, Prefix: p, Sticky: true}, true
			break
		}
	}
	if !found {
	fresh:
		for _, c := range cidrs {
			for _, p := range c.family(req.Family) {
				if addr, ok := a.prefixes[p].nextFree(denied); ok {
					out, found = Allocation{Addr: addr, CIDR: c.Name, Prefix: p}, true
					break fresh
				}
			}
		}
	}
	if !found {
		pick := func(addr netip.Addr) bool { _, _, ok := eligible(addr); return ok }
		if addr, ok := a.held.Oldest(now.Add(-a.opts.ReuseDelay), pick); ok {
			name, p, _ := eligible(addr)
			out, found = Allocation{Addr: addr, CIDR: name, Prefix: p, Reused: true}, true
		} else if addr, ok := a.held.Oldest(time.Time{}, pick); ok {
			name, p, _ := eligible(addr)
			out, found = Allocation{Addr: addr, CIDR: name, Prefix: p, Reused: true, QuarantineCut: true}, true
		}
	}
	if !found {
		names := make([]string, 0, len(cidrs))
		for _, c := range cidrs {
			names = append(names, c.Name)
		}
		return Allocation{}, fmt.Errorf("%w for %s in ServiceCIDRs %s", ErrFull, req.Family, strings.Join(names, ", "))
	}
	if !req.DryRun {
		a.reserve(out.Addr, req.Owner)
	}
	return out, nil
}

// nextFree returns the first free address of the upper band, else of the
// lower band, outside the denied prefixes.
func (ps *prefixState) nextFree(denied []netip.Prefix) (netip.Addr, bool) {
	bands := [][2]uint64{{ps.offset, ps.size}, {0, ps.offset}}
	for _, band := range bands {
		lo := band[0]
		// Each round either returns or skips past one denied prefix.
		for range len(denied) + 1 {
			i, ok := ps.set.NextFree(lo, band[1])
			if !ok {
				break
			}
			addr := ps.addr(i)
			d, bad := inAny(addr, denied)
			if !bad {
				return addr, true
			}
			lo = ps.lastIndexWithin(d) + 1
			if lo == 0 { // wrapped: the denied prefix covers the rest
				break
			}
		}
	}
	return netip.Addr{}, false
}

// Reserve checks an address the user asked for and holds it for
// req.Owner. It fails when the address is outside every usable ServiceCIDR,
// inside one reserved for other namespaces, or held by another Service.
func (a *Allocator) Reserve(addr netip.Addr, req Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expirePending(a.opts.Clock.Now())
	for _, name := range req.Denied {
		if p, bad := inAny(addr, a.cidrs[name].Prefixes); bad {
			return fmt.Errorf("%s: %w (ServiceCIDR range %s is bound exclusively)", addr, ErrDenied, p)
		}
	}
	if !a.allocatable(addr) {
		return fmt.Errorf("%s is %w; allowed ranges: %s", addr, ErrNotInRange, a.rangesLocked(addr.Is4()))
	}
	if st, ok := a.used[addr]; ok {
		if st.owner != req.Owner {
			return fmt.Errorf("%s is %w to Service %s", addr, ErrAllocated, st.owner)
		}
		return nil
	}
	if !req.DryRun {
		a.reserve(addr, req.Owner)
	}
	return nil
}

// allocatable reports whether a usable ServiceCIDR can give addr.
func (a *Allocator) allocatable(addr netip.Addr) bool {
	for _, c := range a.cidrs {
		if !c.Usable {
			continue
		}
		for _, p := range c.Prefixes {
			if _, in := a.prefixes[p].index(addr); in {
				return true
			}
		}
	}
	return false
}

// Ranges lists the usable prefixes of one family, for messages.
func (a *Allocator) Ranges(ipv4 bool) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rangesLocked(ipv4)
}

func (a *Allocator) rangesLocked(ipv4 bool) string {
	var out []string
	for _, c := range a.cidrs {
		if !c.Usable {
			continue
		}
		for _, p := range c.Prefixes {
			if p.Addr().Is4() == ipv4 {
				out = append(out, p.String()+" ("+c.Name+")")
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ", ")
}

// Owner returns who holds addr (committed or pending), if anyone.
func (a *Allocator) Owner(addr netip.Addr) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.used[addr]
	if !ok {
		return "", false
	}
	return st.owner, true
}

// Stats describe one ServiceCIDR.
type Stats struct {
	// Size is the number of allocatable addresses (saturated at MaxUint64).
	Size uint64
	// Allocated are committed or pending addresses; an address in several
	// nested ServiceCIDRs counts in each.
	Allocated uint64
	// Quarantined are released addresses not yet given back.
	Quarantined uint64
}

// Available is what a new Service can get now without cutting a quarantine.
func (s Stats) Available() uint64 { return s.Size - s.Allocated - s.Quarantined }

// Stats returns the usage of every ServiceCIDR by name.
func (a *Allocator) Stats() map[string]Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	heldIn := map[netip.Prefix]uint64{}
	a.held.Each(func(e quarantine.Entry[netip.Addr]) {
		for p, ps := range a.prefixes {
			if _, ok := ps.index(e.Value); ok {
				heldIn[p]++
			}
		}
	})
	out := make(map[string]Stats, len(a.cidrs))
	for name, c := range a.cidrs {
		var st Stats
		for _, p := range c.Prefixes {
			ps := a.prefixes[p]
			st.Size = satAdd(st.Size, ps.size)
			st.Quarantined += heldIn[p]
			st.Allocated += ps.set.Len() - heldIn[p]
		}
		out[name] = st
	}
	return out
}

func satAdd(x, y uint64) uint64 {
	if s := x + y; s >= x {
		return s
	}
	return ^uint64(0)
}

// Release gives back an address reserved for owner that kube-apiserver has
// not committed, e.g. because the request was denied after all.
func (a *Allocator) Release(addr netip.Addr, owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st, ok := a.used[addr]; ok && st.owner == owner && !st.pendingUntil.IsZero() {
		delete(a.used, addr)
		a.unmark(addr)
	}
}
