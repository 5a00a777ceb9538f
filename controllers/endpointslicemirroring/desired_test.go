// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func addrs(ips ...string) []corev1.EndpointAddress {
	out := make([]corev1.EndpointAddress, 0, len(ips))
	for _, ip := range ips {
		out = append(out, corev1.EndpointAddress{IP: ip})
	}
	return out
}

// summary is a group as "addressType ports: ip(ready) ...".
func summary(m mirror) map[string][]string {
	out := map[string][]string{}
	for _, g := range m.groups {
		k := string(g.addressType)
		for _, p := range g.ports {
			k += fmt.Sprintf(" %s/%d/%s", *p.Name, *p.Port, *p.Protocol)
		}
		for _, e := range g.endpoints {
			out[k] = append(out[k], fmt.Sprintf("%s(%t)", e.Addresses[0], *e.Conditions.Ready))
		}
	}
	return out
}

func TestComputeDesiredMirror(t *testing.T) {
	http := []corev1.EndpointPort{{Name: "http", Port: 80}}
	for name, tc := range map[string]struct {
		subsets          []corev1.EndpointSubset
		max              int
		want             map[string][]string
		invalid, skipped int
	}{
		"ready and not-ready addresses, TCP by default": {
			subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.2", "10.0.0.1"), NotReadyAddresses: addrs("10.0.0.3"), Ports: http}},
			max:     1000,
			want:    map[string][]string{"IPv4 http/80/TCP": {"10.0.0.1(true)", "10.0.0.2(true)", "10.0.0.3(false)"}},
		},
		"one slice per address type": {
			subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1", "fd00::1", "::ffff:10.0.0.9"), Ports: http}},
			max:     1000,
			want:    map[string][]string{"IPv4 http/80/TCP": {"10.0.0.1(true)", "10.0.0.9(true)"}, "IPv6 http/80/TCP": {"fd00::1(true)"}},
		},
		"subsets with the same ports share a slice, an address once": {
			subsets: []corev1.EndpointSubset{
				{Addresses: addrs("10.0.0.1"), Ports: http},
				{Addresses: addrs("10.0.0.1", "10.0.0.2"), Ports: http},
				{Addresses: addrs("10.0.0.5"), Ports: []corev1.EndpointPort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
			},
			max: 1000,
			want: map[string][]string{
				"IPv4 http/80/TCP": {"10.0.0.1(true)", "10.0.0.2(true)"},
				"IPv4 dns/53/UDP":  {"10.0.0.5(true)"},
			},
		},
		"invalid addresses are skipped and counted": {
			subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1", "not-an-ip", "fe80::1%eth0"), Ports: http}},
			max:     1000,
			want:    map[string][]string{"IPv4 http/80/TCP": {"10.0.0.1(true)"}},
			invalid: 2, skipped: 2,
		},
		"at most max per subset, ready first": {
			subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1", "10.0.0.2"), NotReadyAddresses: addrs("10.0.0.3"), Ports: http}},
			max:     2,
			want:    map[string][]string{"IPv4 http/80/TCP": {"10.0.0.1(true)", "10.0.0.2(true)"}},
			skipped: 1,
		},
		"no ports": {
			subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1")}},
			max:     1000,
			want:    map[string][]string{"IPv4": {"10.0.0.1(true)"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := computeDesiredMirror(&corev1.Endpoints{Subsets: tc.subsets}, tc.max)
			if diff := cmp.Diff(tc.want, summary(m)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if m.invalid != tc.invalid || m.skipped != tc.skipped {
				t.Errorf("invalid %d skipped %d, want %d and %d", m.invalid, m.skipped, tc.invalid, tc.skipped)
			}
		})
	}
}

func TestSliceMetadata(t *testing.T) {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: "db", UID: "uid-1",
		Labels:      map[string]string{"team": "a", discoveryv1.LabelManagedBy: "someone"},
		Annotations: map[string]string{"note": "x", corev1.EndpointsLastChangeTriggerTime: "t", corev1.LastAppliedConfigAnnotation: "{}"},
	}, Subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1"), Ports: []corev1.EndpointPort{{Name: "pg", Port: 5432}}}}}
	p := planMirror(newSliceMeta(ep), computeDesiredMirror(ep, 1000), nil)
	if len(p.create) != 1 {
		t.Fatalf("plan %+v, want one create", p)
	}
	s := p.create[0]
	if diff := cmp.Diff(map[string]string{"team": "a", discoveryv1.LabelManagedBy: ManagedBy, discoveryv1.LabelServiceName: "db"}, s.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"note": "x"}, s.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if s.GenerateName != "db-" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Endpoints" || !ptr.Deref(s.OwnerReferences[0].Controller, false) {
		t.Errorf("name %q, owners %+v", s.GenerateName, s.OwnerReferences)
	}
}

func TestPlanMirror(t *testing.T) {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "uid-1"},
		Subsets: []corev1.EndpointSubset{{Addresses: addrs("10.0.0.1"), Ports: []corev1.EndpointPort{{Name: "pg", Port: 5432}}}}}
	meta := newSliceMeta(ep)
	m := computeDesiredMirror(ep, 1000)
	first := planMirror(meta, m, nil).create[0]
	first.Name, first.UID = "db-abcde", "s1"

	if p := planMirror(meta, m, []*discoveryv1.EndpointSlice{first}); p.unchanged != 1 || len(p.create)+len(p.update)+len(p.delete) != 0 {
		t.Errorf("an up-to-date slice: %+v, want unchanged", p)
	}
	stale := first.DeepCopy()
	stale.Endpoints[0].Addresses = []string{"10.0.0.9"}
	dup := first.DeepCopy()
	dup.Name, dup.UID = "db-zzzzz", "s2"
	p := planMirror(meta, m, []*discoveryv1.EndpointSlice{stale, dup})
	if len(p.update) != 1 || p.update[0].Name != "db-abcde" || p.update[0].Endpoints[0].Addresses[0] != "10.0.0.1" || len(p.delete) != 1 || p.delete[0].Name != "db-zzzzz" {
		t.Errorf("a changed slice and a duplicate: %+v, want db-abcde updated and db-zzzzz deleted", p)
	}
	// New ports: the old slice is rewritten rather than deleted and created.
	ep.Subsets[0].Ports[0].Port = 5433
	p = planMirror(meta, computeDesiredMirror(ep, 1000), []*discoveryv1.EndpointSlice{first})
	if len(p.update) != 1 || len(p.create) != 0 || len(p.delete) != 0 || *p.update[0].Ports[0].Port != 5433 {
		t.Errorf("changed ports: %+v, want the slice reused", p)
	}
}
