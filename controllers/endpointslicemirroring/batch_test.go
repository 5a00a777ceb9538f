// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"context"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestBatchedDelaysSliceSyncs: with a batch period the syncs a slice event
// asks for arrive after the period, merged; without one, at once.
func TestBatchedDelaysSliceSyncs(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	inner := handler.Funcs{CreateFunc: func(_ context.Context, _ event.TypedCreateEvent[client.Object], q queue) {
		q.Add(reconcile.Request{NamespacedName: key})
	}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-1"}}
	newQueue := func() queue {
		return workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	}

	q := newQueue()
	defer q.ShutDown()
	batched(inner, 0).Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: slice}, q)
	if q.Len() != 1 {
		t.Fatalf("without a batch period: %d requests queued at once, want 1", q.Len())
	}

	const period = 300 * time.Millisecond
	q = newQueue()
	defer q.ShutDown()
	h := batched(inner, period)
	start := time.Now()
	for range 3 {
		h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: slice}, q)
	}
	if q.Len() != 0 {
		t.Fatalf("with a batch period: %d requests queued at once, want none", q.Len())
	}
	got, _ := q.Get()
	if waited := time.Since(start); waited < period {
		t.Errorf("request arrived after %v, before the batch period %v", waited, period)
	}
	q.Done(got)
	if got.NamespacedName != key || q.Len() != 0 {
		t.Errorf("got %v with %d more queued; want %v once", got, q.Len(), key)
	}
}
