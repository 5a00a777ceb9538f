// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipfamily

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestOf(t *testing.T) {
	for in, want := range map[string]corev1.IPFamily{
		"10.0.0.1":        corev1.IPv4Protocol,
		"::ffff:10.0.0.1": corev1.IPv4Protocol,
		"fd00::1":         corev1.IPv6Protocol,
	} {
		if got := Of(netip.MustParseAddr(in)); got != want {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
		if got, ok := OfString(in); !ok || got != want {
			t.Errorf("OfString(%s) = %s, %t, want %s", in, got, ok, want)
		}
	}
	if _, ok := OfString("not-an-ip"); ok {
		t.Error("OfString accepted a non-address")
	}
	if Other(corev1.IPv4Protocol) != corev1.IPv6Protocol || Other(corev1.IPv6Protocol) != corev1.IPv4Protocol {
		t.Error("Other does not swap the families")
	}
}

func TestOfService(t *testing.T) {
	for name, tc := range map[string]struct {
		spec corev1.ServiceSpec
		want []corev1.IPFamily
	}{
		"families given, in order": {
			spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, ClusterIP: "10.0.0.1"},
			want: []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol},
		},
		"none given, IPv6 cluster IP": {spec: corev1.ServiceSpec{ClusterIP: "fd00::10"}, want: []corev1.IPFamily{corev1.IPv6Protocol}},
		"none given, headless":        {spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}, want: []corev1.IPFamily{corev1.IPv4Protocol}},
		"none given, no IP":           {want: []corev1.IPFamily{corev1.IPv4Protocol}},
	} {
		t.Run(name, func(t *testing.T) {
			got := OfService(&corev1.Service{Spec: tc.spec})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
