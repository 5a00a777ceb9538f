// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package servicecidr

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
)

// prefixes parses the CIDRs of a ServiceCIDR; bad ones are skipped (the API
// server validates them).
func prefixes(sc *networkingv1.ServiceCIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range sc.Spec.CIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// covers reports whether outer contains all of inner.
func covers(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// blockingAddress returns an allocated address that would be orphaned if
// sc went away: it lies in sc and in no other ServiceCIDR that stays. The
// deletion may go ahead when every prefix of sc is covered by another
// ServiceCIDR, or no such address exists.
func blockingAddress(sc *networkingv1.ServiceCIDR, all []networkingv1.ServiceCIDR, addrs []netip.Addr) (netip.Addr, bool) {
	var others []netip.Prefix
	for i := range all {
		o := &all[i]
		if o.Name == sc.Name || o.DeletionTimestamp != nil {
			continue
		}
		others = append(others, prefixes(o)...)
	}
	mine := prefixes(sc)
	uncovered := mine[:0:0]
	for _, p := range mine {
		covered := false
		for _, o := range others {
			if covers(o, p) {
				covered = true
				break
			}
		}
		if !covered {
			uncovered = append(uncovered, p)
		}
	}
	if len(uncovered) == 0 {
		return netip.Addr{}, false
	}
	for _, a := range addrs {
		inMine := false
		for _, p := range uncovered {
			if p.Contains(a) {
				inMine = true
				break
			}
		}
		if !inMine {
			continue
		}
		elsewhere := false
		for _, o := range others {
			if o.Contains(a) {
				elsewhere = true
				break
			}
		}
		if !elsewhere {
			return a, true
		}
	}
	return netip.Addr{}, false
}
