// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package informersync

import (
	"context"
	"errors"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

var log = logf.Log.WithName("informersync")

// Kind is a source of the events of one object type from a cache, like
// source.Kind, that reports synced without polling.
type Kind[T client.Object] struct {
	cache      cache.Cache
	obj        T
	handler    handler.TypedEventHandler[T, reconcile.Request]
	predicates []predicate.TypedPredicate[T]

	// started is closed once registered or failed; err says which.
	started      chan struct{}
	err          error
	registration toolscache.ResourceEventHandlerRegistration
}

var _ source.TypedSyncingSource[reconcile.Request] = &Kind[client.Object]{}

// NewKind returns a source of obj's events from c, handed to h after the
// predicates.
func NewKind[T client.Object](c cache.Cache, obj T, h handler.TypedEventHandler[T, reconcile.Request], predicates ...predicate.TypedPredicate[T]) *Kind[T] {
	return &Kind[T]{cache: c, obj: obj, handler: h, predicates: predicates, started: make(chan struct{})}
}

func (k *Kind[T]) String() string { return fmt.Sprintf("informersync source: %T", k.obj) }

// Start registers the event handler with the informer. It does not wait
// for the informer; WaitForSync does.
func (k *Kind[T]) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	defer close(k.started)
	if k.handler == nil {
		k.err = errors.New("informersync.Kind needs a handler")
		return k.err
	}
	inf, err := k.cache.GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
	if err != nil {
		k.err = fmt.Errorf("informer for %T: %w", k.obj, err)
		return k.err
	}
	k.registration, err = inf.AddEventHandlerWithOptions(&adapter[T]{ctx: ctx, q: q, h: k.handler, predicates: k.predicates},
		toolscache.HandlerOptions{})
	if err != nil {
		k.err = fmt.Errorf("event handler for %T: %w", k.obj, err)
	}
	return k.err
}

// WaitForSync returns once the informer listed every object and the
// handler was given each of them, or with an error when ctx ends first.
func (k *Kind[T]) WaitForSync(ctx context.Context) error {
	select {
	case <-k.started:
	case <-ctx.Done():
		return fmt.Errorf("%s was not started: %w", k, context.Cause(ctx))
	}
	if k.err != nil {
		return k.err
	}
	if !toolscache.WaitFor(ctx, "", k.registration.HasSyncedChecker()) {
		return fmt.Errorf("timed out waiting for %s to sync: %w", k, context.Cause(ctx))
	}
	return nil
}

// adapter turns informer notifications into controller-runtime events.
type adapter[T client.Object] struct {
	ctx        context.Context
	q          workqueue.TypedRateLimitingInterface[reconcile.Request]
	h          handler.TypedEventHandler[T, reconcile.Request]
	predicates []predicate.TypedPredicate[T]
}

func (a *adapter[T]) OnAdd(obj any, isInInitialList bool) {
	o, ok := obj.(T)
	if !ok {
		log.Error(nil, "Unexpected object in add notification", "type", fmt.Sprintf("%T", obj))
		return
	}
	e := event.TypedCreateEvent[T]{Object: o, IsInInitialList: isInInitialList}
	if a.pass(func(p predicate.TypedPredicate[T]) bool { return p.Create(e) }) {
		a.h.Create(a.ctx, e, a.q)
	}
}

func (a *adapter[T]) OnUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(T)
	n, ok2 := newObj.(T)
	if !ok1 || !ok2 {
		log.Error(nil, "Unexpected objects in update notification", "old", fmt.Sprintf("%T", oldObj), "new", fmt.Sprintf("%T", newObj))
		return
	}
	e := event.TypedUpdateEvent[T]{ObjectOld: o, ObjectNew: n}
	if a.pass(func(p predicate.TypedPredicate[T]) bool { return p.Update(e) }) {
		a.h.Update(a.ctx, e, a.q)
	}
}

func (a *adapter[T]) OnDelete(obj any) {
	e := event.TypedDeleteEvent[T]{}
	obj, e.DeleteStateUnknown = tombstone.Unwrap(obj)
	o, ok := obj.(T)
	if !ok {
		log.Error(nil, "Unexpected object in delete notification", "type", fmt.Sprintf("%T", obj))
		return
	}
	e.Object = o
	if a.pass(func(p predicate.TypedPredicate[T]) bool { return p.Delete(e) }) {
		a.h.Delete(a.ctx, e, a.q)
	}
}

// pass reports whether every predicate lets the event through.
func (a *adapter[T]) pass(lets func(predicate.TypedPredicate[T]) bool) bool {
	for _, p := range a.predicates {
		if !lets(p) {
			return false
		}
	}
	return true
}
