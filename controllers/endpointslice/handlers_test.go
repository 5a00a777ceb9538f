// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
			// The delaying queue moves items on its own goroutine, and may arm its timer
			// just after a step (reading the clock before it): keep stepping until the
			// item arrives, so the timer fires whenever it was armed.
			deadline := time.Now().Add(5 * time.Second)
			for {
				clk.Step(tc.batch + time.Millisecond)
				if q.Len() >= tc.wantLater || !time.Now().Before(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if got := q.Len(); got != tc.wantLater {
				t.Errorf("queued after the batch period: %d, want %d", got, tc.wantLater)
			}
		})
	}
}

func TestSelectorIndex(t *testing.T) {
	svc := func(name string, sel ...string) *corev1.Service {
		b := builder.Service(name, "ns")
		for i := 0; i+1 < len(sel); i += 2 {
			b = b.Selector(sel[i], sel[i+1])
		}
		return b.Obj()
	}
	external := svc("ext", "app", "web")
	external.Spec.Type = corev1.ServiceTypeExternalName
	cases := map[string]struct {
		set       []*corev1.Service
		remove    []string
		namespace string
		labelSets []map[string]string
		want      []string
	}{
		"one key": {
			set:       []*corev1.Service{svc("web", "app", "web"), svc("db", "app", "db")},
			labelSets: []map[string]string{{"app": "web", "pod-template-hash": "x"}},
			want:      []string{"web"},
		},
		"every key of the selector must match, whichever key it is filed under": {
			set: []*corev1.Service{svc("web", "app", "web", "tier", "front"), svc("web-any", "app", "web"),
				svc("front", "tier", "front")},
			labelSets: []map[string]string{{"tier": "front", "app": "web"}, {"tier": "front", "app": "db"}},
			want:      []string{"front", "web", "web-any"},
		},
		"a Pod without the filing key": {
			set:       []*corev1.Service{svc("web", "app", "web", "tier", "front")},
			labelSets: []map[string]string{{"tier": "front"}},
		},
		"a Service matching both the old and the new labels is given once": {
			set:       []*corev1.Service{svc("web", "app", "web"), svc("v1", "version", "1"), svc("v2", "version", "2")},
			labelSets: []map[string]string{{"app": "web", "version": "2"}, {"app": "web", "version": "1"}},
			want:      []string{"v1", "v2", "web"},
		},
		"a changed selector is filed anew": {
			set:       []*corev1.Service{svc("web", "app", "web"), svc("web", "app", "web2")},
			labelSets: []map[string]string{{"app": "web"}, {"app": "web2"}},
			want:      []string{"web"},
		},
		"removed, selectorless and ExternalName Services are not published": {
			set:       []*corev1.Service{svc("web", "app", "web"), svc("gone", "app", "web"), svc("manual"), external},
			remove:    []string{"gone", "never-there"},
			labelSets: []map[string]string{{"app": "web"}},
			want:      []string{"web"},
		},
		"a selector dropped by an update": {
			set:       []*corev1.Service{svc("web", "app", "web"), svc("web")},
			labelSets: []map[string]string{{"app": "web"}},
		},
		"other namespaces": {
			set:       []*corev1.Service{svc("web", "app", "web")},
			namespace: "other",
			labelSets: []map[string]string{{"app": "web"}},
		},
		"no labels": {
			set:       []*corev1.Service{svc("web", "app", "web")},
			labelSets: []map[string]string{nil, {}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			x := newSelectorIndex()
			for _, s := range tc.set {
				x.set(s)
			}
			for _, n := range tc.remove {
				x.remove("ns", n)
			}
			ns := tc.namespace
			if ns == "" {
				ns = "ns"
			}
			var got []string
			x.matching(ns, func(name string) { got = append(got, name) }, tc.labelSets...)
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("matching Services (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("emptied namespaces are dropped", func(t *testing.T) {
		x := newSelectorIndex()
		x.set(svc("web", "app", "web", "tier", "front"))
		x.set(svc("web2", "app", "web"))
		x.remove("ns", "web")
		x.set(svc("web2"))
		if len(x.byNS) != 0 {
			t.Errorf("index still holds %v", x.byNS)
		}
	})
}
