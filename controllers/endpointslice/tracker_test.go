// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Second)
	t2 = t0.Add(2 * time.Second)
	t3 = t0.Add(3 * time.Second)
)

func triggerService(created time.Time) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)}}
}

// triggerPod is a Pod created at t0 whose Ready condition last changed at
// ready (no Ready condition when ready is zero).
func triggerPod(name string, ready time.Time) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: metav1.NewTime(t0)}}
	if !ready.IsZero() {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(ready)}}
	}
	return pod
}

// TestTriggerTimeTracker follows kube-controller-manager's
// TriggerTimeTracker (k8s.io/endpointslice/util/trigger_time_tracker.go)
// through successive syncs of one Service.
func TestTriggerTimeTracker(t *testing.T) {
	type sync struct {
		svc  *corev1.Service
		pods []*corev1.Pod
		want time.Time
	}
	tests := map[string][]sync{
		"first sync: the Service's creation, whatever the Pods": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t2)}, want: t0},
		},
		"nothing changed: no trigger time": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t0},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}},
		},
		"a Pod became ready: its transition": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t0},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1), triggerPod("b", t2)}, want: t2},
		},
		"several Pods changed: the earliest change": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t0)}, want: t0},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t3), triggerPod("b", t2)}, want: t2},
		},
		"a Pod without a Ready condition: never its creation time": {
			{svc: triggerService(t0), want: t0},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", time.Time{})}},
		},
		"a Pod deleted: no trigger time": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1), triggerPod("b", t1)}, want: t0},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}},
		},
		"a Pod deleted and re-created with the same name: its new transition": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t0},
			{svc: triggerService(t0)},
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t1},
		},
		"a Service update is not a trigger": {
			{svc: triggerService(t0), want: t0},
			{svc: func() *corev1.Service {
				s := triggerService(t0)
				s.Spec.Ports = []corev1.ServicePort{{Port: 81}}
				return s
			}()},
		},
		"a re-created Service: its new creation": {
			{svc: triggerService(t0), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t0},
			{svc: triggerService(t3), pods: []*corev1.Pod{triggerPod("a", t1)}, want: t3},
		},
	}
	for name, syncs := range tests {
		t.Run(name, func(t *testing.T) {
			tr := newTriggerTimeTracker()
			key := types.NamespacedName{Namespace: "ns", Name: "web"}
			for i, s := range syncs {
				if got := tr.compute(key, s.svc, s.pods); !got.Equal(s.want) {
					t.Errorf("sync %d: trigger time %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

func TestTriggerTimeTrackerForget(t *testing.T) {
	tr := newTriggerTimeTracker()
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	pods := []*corev1.Pod{triggerPod("a", t1)}
	tr.compute(key, triggerService(t0), pods)
	tr.forget(key)
	if got := tr.compute(key, triggerService(t2), pods); !got.Equal(t2) {
		t.Errorf("after forget: trigger time %v, want the Service's creation %v", got, t2)
	}
}

func TestSetTriggerTime(t *testing.T) {
	const key = corev1.EndpointsLastChangeTriggerTime
	tests := map[string]struct {
		annotations map[string]string
		trigger     time.Time
		want        map[string]string
	}{
		"set":                               {trigger: t1, want: map[string]string{key: "2026-01-02T03:04:06Z"}},
		"replaced":                          {annotations: map[string]string{key: "old", "x": "y"}, trigger: t1, want: map[string]string{key: "2026-01-02T03:04:06Z", "x": "y"}},
		"removed when no trigger":           {annotations: map[string]string{key: "old", "x": "y"}, want: map[string]string{"x": "y"}},
		"nothing to remove":                 {},
		"UTC with nanoseconds, RFC3339Nano": {trigger: time.Date(2026, 1, 2, 4, 4, 5, 120, time.FixedZone("CET", 3600)), want: map[string]string{key: "2026-01-02T03:04:05.00000012Z"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			setTriggerTime(s, tc.trigger)
			if diff := cmp.Diff(tc.want, s.Annotations, cmpEmptyMap); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

// cmpEmptyMap treats nil and empty annotations alike.
var cmpEmptyMap = cmp.FilterValues(func(a, b map[string]string) bool { return len(a) == 0 && len(b) == 0 }, cmp.Comparer(func(_, _ map[string]string) bool { return true }))
