// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestWantedFamilies(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	dual := []corev1.IPFamily{v4, v6}
	policy := func(p corev1.IPFamilyPolicy) *corev1.IPFamilyPolicy { return ptr.To(p) }
	tests := map[string]struct {
		spec    corev1.ServiceSpec
		cluster []corev1.IPFamily
		want    []corev1.IPFamily
		ok      bool
	}{
		"default is the primary family":          {cluster: dual, want: []corev1.IPFamily{v4}, ok: true},
		"prefer dual on dual-stack":              {spec: corev1.ServiceSpec{IPFamilyPolicy: policy(corev1.IPFamilyPolicyPreferDualStack)}, cluster: dual, want: dual, ok: true},
		"prefer dual on single-stack":            {spec: corev1.ServiceSpec{IPFamilyPolicy: policy(corev1.IPFamilyPolicyPreferDualStack)}, cluster: []corev1.IPFamily{v4}, want: []corev1.IPFamily{v4}, ok: true},
		"require dual on single-stack: leave it": {spec: corev1.ServiceSpec{IPFamilyPolicy: policy(corev1.IPFamilyPolicyRequireDualStack)}, cluster: []corev1.IPFamily{v4}},
		"explicit order":                         {spec: corev1.ServiceSpec{IPFamilyPolicy: policy(corev1.IPFamilyPolicyRequireDualStack), IPFamilies: []corev1.IPFamily{v6, v4}}, cluster: dual, want: []corev1.IPFamily{v6, v4}, ok: true},
		"single IPv6":                            {spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{v6}}, cluster: dual, want: []corev1.IPFamily{v6}, ok: true},
		"family from the given IP":               {spec: corev1.ServiceSpec{ClusterIP: "fd00::5", IPFamilyPolicy: policy(corev1.IPFamilyPolicyPreferDualStack)}, cluster: dual, want: []corev1.IPFamily{v6, v4}, ok: true},
		"two IPs imply dual-stack":               {spec: corev1.ServiceSpec{ClusterIPs: []string{"10.0.0.1", "fd00::1"}}, cluster: dual, want: dual, ok: true},
		"IP contradicts ipFamilies":              {spec: corev1.ServiceSpec{ClusterIPs: []string{"10.0.0.1"}, IPFamilies: []corev1.IPFamily{v6}}, cluster: dual},
		"family the cluster lacks":               {spec: corev1.ServiceSpec{IPFamilies: []corev1.IPFamily{v6}}, cluster: []corev1.IPFamily{v4}},
		"single-stack with two families":         {spec: corev1.ServiceSpec{IPFamilyPolicy: policy(corev1.IPFamilyPolicySingleStack), IPFamilies: dual}, cluster: dual},
		"clusterIP and clusterIPs disagree":      {spec: corev1.ServiceSpec{ClusterIP: "10.0.0.2", ClusterIPs: []string{"10.0.0.1"}}, cluster: dual},
		"no ServiceCIDR known yet":               {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := wantedFamilies(&corev1.Service{Spec: tc.spec}, tc.cluster)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); ok && diff != "" {
				t.Fatalf("families (-want +got):\n%s", diff)
			}
		})
	}
}
