// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package auditevents

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestQuietPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	fake := events.NewFakeRecorder(10)
	r := New(fake, clk, time.Minute)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "1"}}
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "2"}}
	steps := []struct {
		obj    *corev1.Service
		reason string
		after  time.Duration
		want   bool
	}{
		{svc, "X", 0, true},
		{svc, "X", 10 * time.Second, false},
		{svc, "Y", 0, true},
		{other, "X", 0, true},
		{svc, "X", time.Minute, true},
	}
	for i, s := range steps {
		clk.Step(s.after)
		if got := r.Warn(context.Background(), s.obj, s.reason, "Audit", "message"); got != s.want {
			t.Fatalf("step %d: Warn = %v, want %v", i, got, s.want)
		}
	}
	if len(fake.Events) != 4 {
		t.Fatalf("%d Events recorded, want 4", len(fake.Events))
	}
}

// event is a core/v1 view of an Event written through events.k8s.io/v1,
// as the API server returns it.
func event(name, controller, uid, reason, message string, eventTime time.Time, seriesLast *time.Time) *corev1.Event {
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: "ns"},
		InvolvedObject:      corev1.ObjectReference{Kind: "Service", Namespace: "ns", Name: "svc-" + uid, UID: types.UID(uid)},
		Reason:              reason,
		Message:             message,
		Type:                corev1.EventTypeWarning,
		ReportingController: controller,
		EventTime:           metav1.NewMicroTime(eventTime),
	}
	if seriesLast != nil {
		ev.Series = &corev1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(*seriesLast)}
	}
	return ev
}

func historyClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "reportingComponent", func(o client.Object) []string {
			return []string{o.(*corev1.Event).ReportingController}
		}).
		WithIndex(&corev1.Event{}, "type", func(o client.Object) []string { return []string{o.(*corev1.Event).Type} }).
		Build()
}

func TestHistory(t *testing.T) {
	now := time.Now()
	recent, old := now.Add(-5*time.Minute), now.Add(-2*time.Hour)
	const me = "svcnet-audit"
	c := historyClient(
		event("a", me, "a", "Broken", "a is broken", recent, nil),
		event("b", me, "b", "Broken", "b is broken", old, nil),                                 // out of the quiet period
		event("c", "ipallocator-repair-controller", "c", "Broken", "c is broken", recent, nil), // someone else's
		event("d", me, "d", "Broken", "d is broken", old, &recent),                             // a series still going on
		event("e", me, "e", "Broken", "e was broken differently", recent, nil),
	)
	clk := clocktesting.NewFakeClock(now)
	rec := events.NewFakeRecorder(10)
	r := New(rec, clk, time.Hour, WithHistory(c, me))
	for _, tc := range []struct {
		uid  string
		want bool
	}{
		{"a", false}, // already reported, by an earlier run
		{"b", true},
		{"c", true},
		{"d", false},
		{"e", true}, // a different message is a different finding
		{"f", true},
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-" + tc.uid, Namespace: "ns", UID: types.UID(tc.uid)}}
		if got := r.Warn(context.Background(), svc, "Broken", "Audit", "%s is broken", tc.uid); got != tc.want {
			t.Errorf("Warn(%s) = %v, want %v", tc.uid, got, tc.want)
		}
	}
	// The earlier run's Event starts the quiet period from when it was seen.
	clk.Step(56 * time.Minute)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-a", Namespace: "ns", UID: "a"}}
	if !r.Warn(context.Background(), svc, "Broken", "Audit", "a is broken") {
		t.Errorf("an hour after the earlier run's Event, the finding is not reported again")
	}
}

func TestHistoryReadFailure(t *testing.T) {
	now := time.Now()
	lists := 0
	fail := true
	c := interceptor.NewClient(historyClient(event("a", "me", "a", "Broken", "a is broken", now, nil)), interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			if fail {
				return errors.New("forbidden")
			}
			return cl.List(ctx, list, opts...)
		},
	})
	clk := clocktesting.NewFakeClock(now)
	r := New(events.NewFakeRecorder(10), clk, time.Hour, WithHistory(c, "me"))
	warn := func(uid string) bool {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc-" + uid, Namespace: "ns", UID: types.UID(uid)}}
		return r.Warn(context.Background(), svc, "Broken", "Audit", "%s is broken", uid)
	}
	if !warn("a") {
		t.Fatal("without its history the Recorder holds Events back")
	}
	if warn("b"); lists != 1 {
		t.Fatalf("history read %d times right after a failure, want 1", lists)
	}
	fail = false
	clk.Step(seedRetry)
	warn("c")
	warn("d")
	if lists != 2 {
		t.Fatalf("history read %d times in all, want 2 (one retry, then never again)", lists)
	}
}
