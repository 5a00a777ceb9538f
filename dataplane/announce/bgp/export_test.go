// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestExportPolicyOf(t *testing.T) {
	r1, r2, r3 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::3")
	a, b, c6 := netip.MustParsePrefix("198.51.100.1/32"), netip.MustParsePrefix("198.51.100.0/28"), netip.MustParsePrefix("2001:db8:1::1/128")
	tests := map[string]struct {
		paths []Path
		peers []netip.Addr
		want  exportPolicy
	}{
		"each address to its announcement's peers": {
			paths: []Path{{Prefix: a, Peers: []netip.Addr{r1}}, {Prefix: b, Peers: []netip.Addr{r2}}},
			peers: []netip.Addr{r1, r2},
			want:  exportPolicy{r1: {a}, r2: {b}},
		},
		"addresses of one aggregate are one route": {
			paths: []Path{{Prefix: b, Peers: []netip.Addr{r1}}, {Prefix: b, Peers: []netip.Addr{r1}}},
			peers: []netip.Addr{r1},
			want:  exportPolicy{r1: {b}},
		},
		"a peer of two announcements hears both": {
			paths: []Path{{Prefix: b, Peers: []netip.Addr{r1, r2}}, {Prefix: a, Peers: []netip.Addr{r1}}},
			peers: []netip.Addr{r1, r2},
			want:  exportPolicy{r1: {b, a}, r2: {b}}, // by netip.Prefix.Compare: shorter first
		},
		"a peer no path names hears nothing": {
			paths: []Path{{Prefix: a, Peers: []netip.Addr{r1}}},
			peers: []netip.Addr{r1, r3},
			want:  exportPolicy{r1: {a}, r3: nil},
		},
		"a path's peer this node does not peer with is left out": {
			paths: []Path{{Prefix: a, Peers: []netip.Addr{r1, r2}}},
			peers: []netip.Addr{r1},
			want:  exportPolicy{r1: {a}},
		},
		"both families to one peer": {
			paths: []Path{{Prefix: c6, Peers: []netip.Addr{r3}}, {Prefix: a, Peers: []netip.Addr{r3}}},
			peers: []netip.Addr{r3},
			want:  exportPolicy{r3: {a, c6}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := exportPolicyOf(tc.paths, tc.peers)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
			if !got.equal(tc.want) {
				t.Error("equal() disagrees with cmp")
			}
		})
	}
}

// The statements accept a peer's own addresses, a prefix set per family
// (GoBGP's sets hold one family), then reject the rest for that peer.
func TestExportPolicyRequest(t *testing.T) {
	r1, r2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::2")
	e := exportPolicy{
		r1: {netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:1::1/128")},
		r2: nil,
	}
	req := e.request()
	type stmt struct{ Name, Neighbors, Prefixes, Action string }
	var got []stmt
	for _, s := range req.GetPolicies()[0].GetStatements() {
		got = append(got, stmt{s.GetName(), s.GetConditions().GetNeighborSet().GetName(), s.GetConditions().GetPrefixSet().GetName(),
			s.GetActions().GetRouteAction().String()})
	}
	want := []stmt{
		{"svcnet-to-192.0.2.1-ipv4", "svcnet-peer-192.0.2.1", "svcnet-to-192.0.2.1-ipv4", "ACCEPT"},
		{"svcnet-to-192.0.2.1-ipv6", "svcnet-peer-192.0.2.1", "svcnet-to-192.0.2.1-ipv6", "ACCEPT"},
		{"svcnet-reject-192.0.2.1", "svcnet-peer-192.0.2.1", "", "REJECT"},
		{"svcnet-reject-2001:db8::2", "svcnet-peer-2001:db8::2", "", "REJECT"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("statements (-want +got):\n%s", diff)
	}
	sets := map[string][]string{}
	for _, d := range req.GetDefinedSets() {
		var members []string
		members = append(members, d.GetList()...)
		for _, p := range d.GetPrefixes() {
			members = append(members, p.GetIpPrefix())
		}
		sets[d.GetName()] = members
	}
	wantSets := map[string][]string{
		"svcnet-peer-192.0.2.1":    {"192.0.2.1/32"},
		"svcnet-to-192.0.2.1-ipv4": {"198.51.100.0/24"},
		"svcnet-to-192.0.2.1-ipv6": {"2001:db8:1::1/128"},
		"svcnet-peer-2001:db8::2":  {"2001:db8::2/128"},
	}
	if diff := cmp.Diff(wantSets, sets); diff != "" {
		t.Errorf("defined sets (-want +got):\n%s", diff)
	}
}
