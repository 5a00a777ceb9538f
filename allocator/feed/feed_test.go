// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package feed

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcnet-io/svcnet/allocator/ipam"
)

// An address stays used while a Service holds it or its IPAddress exists:
// someone deleting the IPAddress of a live Service must not free the
// address for the next Service (two Services with one ClusterIP).
func TestAddressUsedWhileServiceOrIPAddressHoldsIt(t *testing.T) {
	const ip = "10.96.0.10"
	ipa := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIPs: []string{ip}}}
	cases := map[string]struct {
		// gone lists what goes, in order: "ipaddress" or "service".
		gone []string
		want []uint64 // allocated after each
	}{
		"the IPAddress deleted by hand, then the Service": {gone: []string{"ipaddress", "service"}, want: []uint64{1, 0}},
		"the Service deleted, then its IPAddress":         {gone: []string{"service", "ipaddress"}, want: []uint64{1, 0}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			a := ipam.New(ipam.Options{})
			if err := a.SetCIDR(ipam.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}, Usable: true}); err != nil {
				t.Fatal(err)
			}
			present := map[string]bool{"ipaddress": true, "service": true}
			addresses := AddressHandler(a, func(string) bool { return present["service"] })
			services := ServiceAddressHandler(a, func(string) bool { return present["ipaddress"] })
			addresses.OnAdd(ipa, true)
			services.OnAdd(svc, true)
			for i, what := range tc.gone {
				present[what] = false
				if what == "ipaddress" {
					addresses.OnDelete(ipa)
				} else {
					services.OnDelete(svc)
				}
				if got := a.Stats()["kubernetes"].Allocated; got != tc.want[i] {
					t.Errorf("after the %s went: %d allocated, want %d", what, got, tc.want[i])
				}
			}
		})
	}
}
