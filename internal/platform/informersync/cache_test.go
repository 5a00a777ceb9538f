// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package informersync

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestWaitForCacheSyncWaitsOnTheInformersFirst checks, against a fake
// wrapped cache, that the wrapper waits on the sync channel of every
// informer asked for through it (by object, by kind, by index) before it
// asks the wrapped cache, and gives up when ctx ends.
func TestWaitForCacheSyncWaitsOnTheInformersFirst(t *testing.T) {
	inner := &fakeCache{informers: map[string]*fakeInformer{}}
	c := Wrap(inner)
	ctx := context.Background()
	if _, err := c.GetInformer(ctx, &corev1.Service{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformerForKind(ctx, corev1.SchemeGroupVersion.WithKind("Node")); err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &discoveryv1.EndpointSlice{}, "x", func(client.Object) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := len(inner.informers); got != 3 {
		t.Fatalf("wrapped cache holds %d informers, want 3", got)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if c.WaitForCacheSync(canceled) {
		t.Error("WaitForCacheSync returned true with no informer synced")
	}
	if inner.early {
		t.Error("the wrapped cache was asked before the informers synced")
	}

	for _, inf := range inner.informers {
		inf.synced.close()
	}
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("WaitForCacheSync returned false with every informer synced")
	}
	if !inner.waited || inner.early {
		t.Errorf("the wrapped cache was asked: after sync %v, before %v; want only after", inner.waited, inner.early)
	}
}

// fakeCache hands out fakeInformers and records when its WaitForCacheSync
// was called: a wrapper that polls it instead of waiting on the informers
// asks it while they are unsynced.
type fakeCache struct {
	cache.Cache
	informers map[string]*fakeInformer
	waited    bool // asked with every informer synced
	early     bool // asked while one was not
}

func (f *fakeCache) informer(key string) *fakeInformer {
	if f.informers[key] == nil {
		f.informers[key] = &fakeInformer{synced: doneChan{name: key, ch: make(chan struct{})}}
	}
	return f.informers[key]
}

func (f *fakeCache) GetInformer(_ context.Context, obj client.Object, _ ...cache.InformerGetOption) (cache.Informer, error) {
	return f.informer(typeName(obj)), nil
}

func (f *fakeCache) GetInformerForKind(_ context.Context, gvk schema.GroupVersionKind, _ ...cache.InformerGetOption) (cache.Informer, error) {
	return f.informer(gvk.Kind), nil
}

func (f *fakeCache) IndexField(_ context.Context, obj client.Object, _ string, _ client.IndexerFunc) error {
	f.informer(typeName(obj))
	return nil
}

func (f *fakeCache) WaitForCacheSync(context.Context) bool {
	for _, inf := range f.informers {
		if !toolscache.IsDone(inf.synced) {
			f.early = true
			return false
		}
	}
	f.waited = true
	return true
}

func typeName(obj client.Object) string {
	switch obj.(type) {
	case *corev1.Service:
		return "Service"
	case *discoveryv1.EndpointSlice:
		return "EndpointSlice"
	}
	return "other"
}

type fakeInformer struct {
	cache.Informer
	synced doneChan
}

func (i *fakeInformer) HasSyncedChecker() toolscache.DoneChecker { return i.synced }

type doneChan struct {
	name string
	ch   chan struct{}
}

func (d doneChan) Name() string          { return d.name }
func (d doneChan) Done() <-chan struct{} { return d.ch }
func (d doneChan) close()                { close(d.ch) }
