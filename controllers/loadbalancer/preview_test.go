// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// TestPreviewService: an address svcnet would keep lies in a Ready pool
// that takes the Service, whatever the pool's assignment; others are
// replaced; MetalLB's fields read and a missing named pool are said.
func TestPreviewService(t *testing.T) {
	pools := []svcnetv1alpha1.LoadBalancerIPPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "public"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.0.2.0/24"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "reserved"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"198.51.100.0/24"},
			Assignment: svcnetv1alpha1.PoolAssignmentOnRequest}},
		{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"203.0.113.0/24"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
	}
	lb := func(annotations map[string]string, ips ...string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Annotations: annotations},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return s
	}
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for name, tc := range map[string]struct {
		svc  *corev1.Service
		want Preview
	}{
		"addresses of pools that take it are kept, the assignment aside": {
			svc:  lb(nil, "192.0.2.7", "198.51.100.9"),
			want: Preview{Kept: addrs("192.0.2.7", "198.51.100.9")},
		},
		"an address in no pool, or in a pool that does not take it, is replaced": {
			svc:  lb(nil, "10.1.2.3", "203.0.113.4"),
			want: Preview{Replaced: addrs("10.1.2.3", "203.0.113.4")},
		},
		"MetalLB's fields are read; a missing named pool is a problem": {
			svc: lb(map[string]string{MetalLBAnnotationSharingKey: "k", MetalLBAnnotationPool: "gone"}, "192.0.2.7"),
			want: Preview{Kept: addrs("192.0.2.7"),
				Read:    []string{`metallb.io/address-pool "gone" used as svcnet.io/load-balancer-ip-pool`, `metallb.io/allow-shared-ip "k" used as svcnet.io/sharing-key`},
				Problem: "LoadBalancerIPPool gone, named by annotation metallb.io/address-pool, does not exist"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := PreviewService(tc.svc, pools, nil, map[string]string{"kubernetes.io/metadata.name": "shop"})
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("PreviewService (-want +got):\n%s", diff)
			}
		})
	}
}
