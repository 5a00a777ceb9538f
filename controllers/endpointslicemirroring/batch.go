// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// batched delays every request h queues by period, as kube-controller-manager's
// mirroring controller delays the syncs that EndpointSlice changes cause
// (--mirroring-endpointslice-updates-batch-period). A period of 0 returns
// h itself.
func batched(h handler.EventHandler, period time.Duration) handler.EventHandler {
	if period <= 0 {
		return h
	}
	return &batchedHandler{inner: h, period: period}
}

type batchedHandler struct {
	inner  handler.EventHandler
	period time.Duration
}

func (b *batchedHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	b.inner.Create(ctx, e, delayingQueue{q, b.period})
}

func (b *batchedHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	b.inner.Update(ctx, e, delayingQueue{q, b.period})
}

func (b *batchedHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	b.inner.Delete(ctx, e, delayingQueue{q, b.period})
}

func (b *batchedHandler) Generic(ctx context.Context, e event.TypedGenericEvent[client.Object], q queue) {
	b.inner.Generic(ctx, e, delayingQueue{q, b.period})
}

// delayingQueue turns Add into AddAfter(period): requests queued within
// one period are merged by the work queue.
type delayingQueue struct {
	queue
	period time.Duration
}

func (d delayingQueue) Add(r reconcile.Request) { d.AddAfter(r, d.period) }
