// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"net/netip"
	"slices"

	"github.com/svcnet-io/svcnet/allocator/quarantine"
)

// kube-apiserver runs one allocator per ServiceCIDR prefix and labels its
// kube_apiserver_clusterip_allocator_* series with that prefix. The methods
// here give the same per-prefix view, so that svcnet can export those
// series for the addresses it chooses.

// PrefixStats returns the usage of every prefix of the known ServiceCIDRs.
// A prefix that several ServiceCIDRs name appears once.
func (a *Allocator) PrefixStats() map[netip.Prefix]Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[netip.Prefix]Stats, len(a.prefixes))
	for p, ps := range a.prefixes {
		out[p] = Stats{Size: ps.size, Allocated: ps.set.Len()}
	}
	a.held.Each(func(e quarantine.Entry[netip.Addr]) {
		for p, ps := range a.prefixes {
			if _, ok := ps.index(e.Value); ok {
				st := out[p]
				st.Allocated--
				st.Quarantined++
				out[p] = st
			}
		}
	})
	return out
}

// PrefixOf returns the prefix an address a user asked for is given from:
// the narrowest prefix of a usable ServiceCIDR that can give it
// (kube-apiserver would pick any of nested ones; the narrowest is
// deterministic). ok is false when no such prefix holds addr. (Allocate
// says the prefix of the addresses it chooses.)
func (a *Allocator) PrefixOf(addr netip.Addr) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var best netip.Prefix
	for _, c := range a.cidrs {
		if !c.Usable {
			continue
		}
		for _, p := range c.Prefixes {
			if _, in := a.prefixes[p].index(addr); in && (!best.IsValid() || p.Bits() > best.Bits()) {
				best = p
			}
		}
	}
	return best, best.IsValid()
}

// CandidatePrefixes returns the prefixes Allocate would draw from for req,
// in preference order, each once: those kube-apiserver's allocators would
// each count a failure on when req cannot be served.
func (a *Allocator) CandidatePrefixes(req Request) []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	cidrs, _ := a.candidates(req)
	var out []netip.Prefix
	for _, c := range cidrs {
		for _, p := range c.family(req.Family) {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}
