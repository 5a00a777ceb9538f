// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package ipfamily answers "which IP family" the one way svcnet's
// controllers, admission and node agent share: for an address, a string,
// and a Service.
package ipfamily

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Of is the family of an address; IPv4-mapped IPv6 addresses are IPv4.
func Of(a netip.Addr) corev1.IPFamily {
	if a.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// OfString is the family of a textual address; ok is false when s is not
// an address.
func OfString(s string) (family corev1.IPFamily, ok bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return "", false
	}
	return Of(a), true
}

// OfPrefix is the family of a CIDR.
func OfPrefix(p netip.Prefix) corev1.IPFamily { return Of(p.Addr()) }

// Other is the family that is not f.
func Other(f corev1.IPFamily) corev1.IPFamily {
	if f == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// OfService returns a Service's families in the order of spec.ipFamilies.
// A Service the API server left without families (ExternalName, and old
// headless Services) is read from its cluster IP, else IPv4.
func OfService(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) > 0 {
		return svc.Spec.IPFamilies
	}
	if f, ok := OfString(svc.Spec.ClusterIP); ok {
		return []corev1.IPFamily{f}
	}
	return []corev1.IPFamily{corev1.IPv4Protocol}
}
