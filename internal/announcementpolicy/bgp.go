// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// PathAttributes are what a BGP announcement adds to the routes of the
// addresses it covers.
type PathAttributes struct {
	// Communities are RFC 1997 communities, as 32-bit values, sorted.
	Communities []uint32
	// LargeCommunities are RFC 8092 large communities, sorted.
	LargeCommunities []LargeCommunity
	// LocalPreference is the LOCAL_PREF, when HasLocalPreference.
	LocalPreference    uint32
	HasLocalPreference bool
}

// LargeCommunity is an RFC 8092 large community.
type LargeCommunity struct{ Global, Local1, Local2 uint32 }

// Equal tells whether a and b are the same attributes.
func (a PathAttributes) Equal(b PathAttributes) bool {
	return slices.Equal(a.Communities, b.Communities) && slices.Equal(a.LargeCommunities, b.LargeCommunities) &&
		a.HasLocalPreference == b.HasLocalPreference && a.LocalPreference == b.LocalPreference
}

// wellKnownCommunities are the communities with names (IANA's "BGP
// Well-known Communities" registry), as FRR spells them.
var wellKnownCommunities = map[string]uint32{
	"graceful-shutdown":   0xFFFF0000,
	"accept-own":          0xFFFF0001,
	"llgr-stale":          0xFFFF0006,
	"no-llgr":             0xFFFF0007,
	"blackhole":           0xFFFF029A,
	"no-export":           0xFFFFFF01,
	"no-advertise":        0xFFFFFF02,
	"no-export-subconfed": 0xFFFFFF03,
	"no-peer":             0xFFFFFF04,
}

// ParseCommunity parses "ASN:value" (each 0-65535) or a well-known name.
func ParseCommunity(s string) (uint32, error) {
	if v, ok := wellKnownCommunities[s]; ok {
		return v, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 2 {
		return 0, fmt.Errorf("community %q is not ASN:value or a well-known name such as no-export", s)
	}
	var v [2]uint64
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("community %q: each part must be a number 0-65535", s)
		}
		v[i] = n
	}
	return uint32(v[0]<<16 | v[1]), nil
}

// ParseLargeCommunity parses "global:local1:local2" (each 0-4294967295).
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return LargeCommunity{}, fmt.Errorf("large community %q is not global:local1:local2", s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return LargeCommunity{}, fmt.Errorf("large community %q: each part must be a number 0-4294967295", s)
		}
		v[i] = uint32(n)
	}
	return LargeCommunity{v[0], v[1], v[2]}, nil
}

func compileAttributes(b *svcnetv1alpha1.BGPAnnouncement) (PathAttributes, error) {
	var out PathAttributes
	var errs []error
	for i, s := range b.Communities {
		c, err := ParseCommunity(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp.communities[%d]: %w", i, err))
			continue
		}
		out.Communities = append(out.Communities, c)
	}
	for i, s := range b.LargeCommunities {
		c, err := ParseLargeCommunity(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp.largeCommunities[%d]: %w", i, err))
			continue
		}
		out.LargeCommunities = append(out.LargeCommunities, c)
	}
	if lp := b.LocalPreference; lp != nil {
		if *lp < 0 || *lp > 1<<32-1 {
			errs = append(errs, fmt.Errorf("bgp.localPreference %d is out of range 0-4294967295", *lp))
		} else {
			out.LocalPreference, out.HasLocalPreference = uint32(*lp), true
		}
	}
	slices.Sort(out.Communities)
	out.Communities = slices.Compact(out.Communities)
	slices.SortFunc(out.LargeCommunities, cmpLarge)
	out.LargeCommunities = slices.Compact(out.LargeCommunities)
	return out, errors.Join(errs...)
}

func cmpLarge(a, b LargeCommunity) int {
	return cmp.Or(cmp.Compare(a.Global, b.Global), cmp.Compare(a.Local1, b.Local1), cmp.Compare(a.Local2, b.Local2))
}

// ParseRouterID parses a router ID as the Node annotation
// svcnet.io/bgp-router-id gives it: an IPv4 address other than 0.0.0.0.
func ParseRouterID(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() || a.IsUnspecified() {
		return netip.Addr{}, fmt.Errorf("%s %q must be an IPv4 address other than 0.0.0.0", svcnetv1alpha1.AnnotationBGPRouterID, s)
	}
	return a, nil
}

// RouterID is the BGP router ID of a node, in this order: the Node's
// annotation svcnet.io/bgp-router-id; its first IPv4 InternalIP; the
// first global IPv4 address of its interfaces (ifaceIPv4, may be
// invalid); derived from its first IPv6 InternalIP, else from its name.
// A derived ID is the first four bytes of SHA-256("svcnet-router-id/" +
// the address or name), a first byte of 0 or 127 made 1 or 128 so that
// it is never 0.x.x.x nor loopback; it is stable while the
// node keeps its address, and two nodes share one with a chance of about
// n²/2³³ (1 in 8500 for 100 nodes): set the annotation then. A bad
// annotation is returned as the error, with the ID the node uses instead.
func RouterID(node *corev1.Node, ifaceIPv4 netip.Addr) (netip.Addr, error) {
	var annErr error
	if node != nil {
		if s, ok := node.Annotations[svcnetv1alpha1.AnnotationBGPRouterID]; ok {
			id, err := ParseRouterID(s)
			if err == nil {
				return id, nil
			}
			annErr = err
		}
	}
	var v6 netip.Addr
	if node != nil {
		for _, a := range node.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip = ip.Unmap(); ip.Is4() {
				return ip, annErr
			}
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	if ifaceIPv4.IsValid() {
		return ifaceIPv4, annErr
	}
	seed := ""
	switch {
	case v6.IsValid():
		seed = v6.String()
	case node != nil:
		seed = node.Name
	}
	return derivedRouterID(seed), annErr
}

func derivedRouterID(seed string) netip.Addr {
	h := sha256.Sum256([]byte("svcnet-router-id/" + seed))
	b := [4]byte{h[0], h[1], h[2], h[3]}
	switch b[0] {
	case 0:
		b[0] = 1
	case 127:
		b[0] = 128
	}
	return netip.AddrFrom4(b)
}
