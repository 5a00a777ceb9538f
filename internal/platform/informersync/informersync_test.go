// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package informersync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/internal/platform/informersync"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestAgainstAPIServer checks, against a real API server holding objects
// before anything starts, that the wrapped cache reports synced only with
// every informer it handed out synced, and that a source's WaitForSync
// returns only once its handler was given every listed object.
func TestAgainstAPIServer(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := env.Namespace(ctx, "informersync")
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	if err := testenv.Parallel(n, func(i int) error {
		return env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("cm-%d", i), Namespace: ns, Labels: map[string]string{"even": fmt.Sprint(i%2 == 0)}}})
	}); err != nil {
		t.Fatal(err)
	}

	newCache := func(t *testing.T) cache.Cache {
		c, err := informersync.NewCache(env.Config, cache.Options{Scheme: env.Scheme,
			DefaultNamespaces: map[string]cache.Config{ns: {}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("cache waits for every informer it handed out", func(t *testing.T) {
		c := newCache(t)
		if err := informersync.Prestart(ctx, c, &corev1.ConfigMap{}, &corev1.Secret{}); err != nil {
			t.Fatal(err)
		}
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = c.Start(cctx) }()
		if !c.WaitForCacheSync(ctx) {
			t.Fatal("WaitForCacheSync returned false")
		}
		for _, o := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
			inf, err := c.GetInformer(ctx, o, cache.BlockUntilSynced(false))
			if err != nil {
				t.Fatal(err)
			}
			if !inf.HasSynced() {
				t.Errorf("%T informer not synced after WaitForCacheSync", o)
			}
		}
		var list corev1.ConfigMapList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if got := len(list.Items); got < n {
			t.Errorf("synced cache lists %d ConfigMaps, want at least %d", got, n)
		}
	})

	t.Run("cache never started", func(t *testing.T) {
		c := newCache(t)
		if err := informersync.Prestart(ctx, c, &corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
		short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		defer stop()
		if c.WaitForCacheSync(short) {
			t.Error("WaitForCacheSync returned true for a cache that was never started")
		}
	})

	t.Run("source hands every listed object over before it reports synced", func(t *testing.T) {
		c := newCache(t)
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() { _ = c.Start(cctx) }()
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		even := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["even"] == "true" })
		src := informersync.NewKind[client.Object](c, &corev1.ConfigMap{}, &slowHandler{}, even)
		if err := src.Start(cctx, q); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		// kube-root-ca.crt is published into every namespace, and has no label.
		if got := q.Len(); got != n/2 {
			t.Fatalf("queue holds %d requests at sync, want the %d even ConfigMaps", got, n/2)
		}

		// Later changes arrive through the same handler and predicates.
		drain(q)
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cm-0"}, cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"k": "v"}
		if err := env.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-1", Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-2", Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{"cm-0": true, "cm-2": true} // cm-1 is odd: filtered out
		got := map[string]bool{}
		for len(got) < len(want) {
			req, shutdown := q.Get()
			if shutdown {
				t.Fatal("queue shut down")
			}
			got[req.Name] = true
			q.Done(req)
		}
		for name := range got {
			if !want[name] {
				t.Errorf("unexpected request for %s", name)
			}
		}
	})

	t.Run("source on a cache that never starts", func(t *testing.T) {
		c := newCache(t)
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		src := informersync.NewKind[client.Object](c, &corev1.Secret{}, &handler.EnqueueRequestForObject{})
		if err := src.Start(ctx, q); err != nil {
			t.Fatal(err)
		}
		short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		defer stop()
		if err := src.WaitForSync(short); err == nil {
			t.Error("WaitForSync succeeded on a cache that never started")
		}
	})

	t.Run("source without a handler", func(t *testing.T) {
		src := informersync.NewKind[client.Object](newCache(t), &corev1.Secret{}, nil)
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		if err := src.Start(ctx, q); err == nil {
			t.Error("Start succeeded without a handler")
		}
		// WaitForSync reports Start's failure at once, not a timeout.
		short, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		if err := src.WaitForSync(short); err == nil || !strings.Contains(err.Error(), "needs a handler") {
			t.Errorf("WaitForSync after a failed Start = %v, want the handler error", err)
		}
	})
}

func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	for q.Len() > 0 {
		req, _ := q.Get()
		q.Done(req)
	}
}

// slowHandler enqueues like EnqueueRequestForObject, but takes its time
// over each created object, so that a source reporting synced before its
// handler saw the whole initial list is caught every time.
type slowHandler struct {
	handler.EnqueueRequestForObject
}

func (h *slowHandler) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	time.Sleep(time.Millisecond)
	h.EnqueueRequestForObject.Create(ctx, e, q)
}
