// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStatusReadinessGates checks that a Pod with readiness gates is
// Ready only once every gate's condition is True, that its containers
// are ready meanwhile, and that conditions the kubelet does not own (a
// gate's) are kept in the status it writes, as the kubelet does.
func TestStatusReadinessGates(t *testing.T) {
	const gate = corev1.PodConditionType("k8s.io/blue-green")
	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	newPod := func() *Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "blue-pod", UID: "0123456789abcdef"},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "agnhost", Image: "agnhost"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
			},
		}
		return &Pod{
			r: &Runtime{}, pod: pod, initialized: true,
			containers: map[string]*containerState{"agnhost": {standIn: true, running: now.Add(-time.Minute), started: true, ready: true}},
		}
	}
	condition := func(s corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
		i := slices.IndexFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == t })
		if i < 0 {
			return nil
		}
		return &s.Conditions[i]
	}
	for name, tc := range map[string]struct {
		old       []corev1.PodCondition
		wantReady corev1.ConditionStatus
	}{
		"gate not set":    {wantReady: corev1.ConditionFalse},
		"gate False":      {old: []corev1.PodCondition{{Type: gate, Status: corev1.ConditionFalse}}, wantReady: corev1.ConditionFalse},
		"gate True":       {old: []corev1.PodCondition{{Type: gate, Status: corev1.ConditionTrue}}, wantReady: corev1.ConditionTrue},
		"gate True again": {old: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}, {Type: gate, Status: corev1.ConditionTrue}}, wantReady: corev1.ConditionTrue},
	} {
		t.Run(name, func(t *testing.T) {
			s := newPod().Status(StatusInput{Old: corev1.PodStatus{Conditions: tc.old}, HostIPs: []netip.Addr{netip.MustParseAddr("172.30.0.11")}, PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.2")}, Started: now, Now: now})
			if c := condition(s, corev1.ContainersReady); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("ContainersReady: %+v, want True", c)
			}
			ready := condition(s, corev1.PodReady)
			if ready == nil || ready.Status != tc.wantReady {
				t.Fatalf("Ready: %+v, want %s", ready, tc.wantReady)
			}
			if tc.wantReady == corev1.ConditionFalse && ready.Reason != reasonReadinessGatesNotReady {
				t.Errorf("Ready's reason: %q, want %s", ready.Reason, reasonReadinessGatesNotReady)
			}
			for _, o := range tc.old {
				if o.Type == gate {
					if c := condition(s, gate); c == nil || c.Status != o.Status {
						t.Errorf("the gate's condition is not kept: %+v, want %s", c, o.Status)
					}
				}
			}
			if n := len(s.Conditions); n != 5+len(slices.DeleteFunc(slices.Clone(tc.old), func(c corev1.PodCondition) bool { return c.Type != gate })) {
				t.Errorf("conditions: %d, want the kubelet's five and the gate's: %+v", n, s.Conditions)
			}
		})
	}
}

// TestEviction checks the local storage eviction: a container over its
// ephemeral-storage limit is named with the kubelet's message, one
// within it or without a limit is not, and an evicted Pod reports
// Failed with reason Evicted whatever its containers do.
func TestEviction(t *testing.T) {
	limited := corev1.Container{Name: "evicted-pod", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("5Mi")},
	}}
	for name, tc := range map[string]struct {
		c    corev1.Container
		used int64
		want string
	}{
		"over the limit":  {c: limited, used: 15 << 20, want: `Container evicted-pod exceeded its local ephemeral storage limit "5Mi". `},
		"at the limit":    {c: limited, used: 5 << 20},
		"under the limit": {c: limited, used: 64 << 10},
		"no limit":        {c: corev1.Container{Name: "c"}, used: 1 << 30},
	} {
		t.Run(name, func(t *testing.T) {
			if got := ephemeralStorageExceeded(tc.c, tc.used); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}

	now := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	p := &Pod{
		r: &Runtime{}, initialized: true,
		pod:        &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0123456789abcdef"}, Spec: corev1.PodSpec{Containers: []corev1.Container{limited}}},
		containers: map[string]*containerState{"evicted-pod": {standIn: true, running: now.Add(-time.Minute), started: true, ready: true}},
	}
	in := StatusInput{HostIPs: []netip.Addr{netip.MustParseAddr("172.30.0.11")}, PodIPs: []netip.Addr{netip.MustParseAddr("10.244.1.2")}, Started: now, Now: now}
	if s := p.Status(in); s.Phase != corev1.PodRunning || s.Reason != "" {
		t.Fatalf("before the eviction: phase %s reason %q, want Running and none", s.Phase, s.Reason)
	}
	p.evicted = ephemeralStorageExceeded(limited, 15<<20)
	s := p.Status(in)
	if s.Phase != corev1.PodFailed || s.Reason != reasonEvicted || s.Message != p.evicted {
		t.Errorf("after the eviction: phase %s reason %q message %q, want Failed, Evicted and the eviction's message", s.Phase, s.Reason, s.Message)
	}
}
