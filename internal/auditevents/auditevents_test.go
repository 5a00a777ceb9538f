package auditevents

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
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
		if got := r.Warn(s.obj, s.reason, "Audit", "message"); got != s.want {
			t.Fatalf("step %d: Warn = %v, want %v", i, got, s.want)
		}
	}
	if len(fake.Events) != 4 {
		t.Fatalf("%d Events recorded, want 4", len(fake.Events))
	}
}
