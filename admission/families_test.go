// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"strings"
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

func TestKeepsPreferDualStack(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	service := func(policy corev1.IPFamilyPolicy, ips ...string) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIPs: ips}}
		if policy != "" {
			s.Spec.IPFamilyPolicy = ptr.To(policy)
		}
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
		for _, ip := range ips {
			if ip == corev1.ClusterIPNone {
				continue
			}
			if strings.Contains(ip, ":") {
				s.Spec.IPFamilies = append(s.Spec.IPFamilies, v6)
			} else {
				s.Spec.IPFamilies = append(s.Spec.IPFamilies, v4)
			}
		}
		return s
	}
	prefer, require, single := corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack, corev1.IPFamilyPolicySingleStack
	tests := map[string]struct {
		svc, old *corev1.Service
		want     bool
	}{
		"a create":                       {svc: service(prefer), want: false},
		"an update that changes nothing": {svc: service(prefer, "10.96.0.5"), old: service(prefer, "10.96.0.5"), want: true},
		"a dual-stack one kept":          {svc: service(prefer, "10.96.0.5", "fd00::5"), old: service(prefer, "10.96.0.5", "fd00::5"), want: true},
		"policy left out (PATCH)":        {svc: service("", "10.96.0.5"), old: service(prefer, "10.96.0.5"), want: false},
		"upgraded by RequireDualStack":   {svc: service(require, "10.96.0.5"), old: service(prefer, "10.96.0.5"), want: false},
		"a secondary IP asked for":       {svc: service(prefer, "10.96.0.5", "fd00::5"), old: service(prefer, "10.96.0.5"), want: false},
		"clusterIPs left out of a PUT":   {svc: service(prefer), old: service(prefer, "10.96.0.5"), want: false},
		"from SingleStack":               {svc: service(prefer, "10.96.0.5"), old: service(single, "10.96.0.5"), want: false},
		"the type changes": {svc: service(prefer, "10.96.0.5"), old: func() *corev1.Service {
			s := service(prefer, "10.96.0.5")
			s.Spec.Type = corev1.ServiceTypeNodePort
			return s
		}(), want: false},
		"headless: no ClusterIP to keep": {svc: service(prefer, corev1.ClusterIPNone), old: service(prefer, corev1.ClusterIPNone), want: false},
		"the secondary family asked for only": {svc: func() *corev1.Service {
			s := service(prefer, "10.96.0.5")
			s.Spec.IPFamilies = append(s.Spec.IPFamilies, v6)
			return s
		}(), old: service(prefer, "10.96.0.5"), want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := keepsPreferDualStack(tc.svc, tc.old); got != tc.want {
				t.Fatalf("keepsPreferDualStack = %v, want %v", got, tc.want)
			}
		})
	}
}
