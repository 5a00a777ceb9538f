package endpointslice

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/test/builder"
)

func TestPodEventsWaitForTheBatchPeriod(t *testing.T) {
	cases := map[string]struct {
		batch     time.Duration
		wantFirst int // queued right after the events
		wantLater int // queued once the batch period passed
	}{
		"no batch period: queued at once":       {batch: 0, wantFirst: 1, wantLater: 1},
		"a batch period: queued once, after it": {batch: time.Second, wantFirst: 0, wantLater: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
				workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
			defer q.ShutDown()
			r := New(nil, nil, Options{MaxEndpointsPerSlice: 100, BatchPeriod: tc.batch, Workers: 1}, WithClock(clk))
			r.selectors.set(builder.Service("web", "ns").Selector("app", "web").Obj())
			h := &podHandler{r: r}
			// Three Pods of the same Service change together.
			for _, name := range []string{"a", "b", "c"} {
				pod := builder.Pod(name, "ns").Label("app", "web").IP("10.0.0.1").Ready().Obj()
				h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: pod}, q)
			}
			if got := q.Len(); got != tc.wantFirst {
				t.Errorf("queued right after the events: %d, want %d", got, tc.wantFirst)
			}
			clk.Step(tc.batch + time.Millisecond)
			deadline := time.Now().Add(5 * time.Second)
			for q.Len() < tc.wantLater && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // the delaying queue moves items on its own goroutine
			}
			if got := q.Len(); got != tc.wantLater {
				t.Errorf("queued after the batch period: %d, want %d", got, tc.wantLater)
			}
		})
	}
}
