// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package informersync

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewCache is a cache.NewCacheFunc (for manager.Options.NewCache) whose
// WaitForCacheSync does not poll.
func NewCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(config, opts)
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Wrap returns c with a WaitForCacheSync that waits on the informers'
// sync checkers for every informer requested through the returned cache
// (GetInformer, GetInformerForKind, IndexField).
func Wrap(c cache.Cache) cache.Cache {
	return &syncCache{Cache: c, seen: map[string]informerRef{}}
}

// syncCache is a cache.Cache that remembers which informers were asked for.
type syncCache struct {
	cache.Cache

	mu   sync.Mutex
	seen map[string]informerRef
}

// informerRef names one informer of the wrapped cache: by a typed object
// or, for GetInformerForKind, by its kind.
type informerRef struct {
	obj client.Object
	gvk schema.GroupVersionKind
}

func (c *syncCache) get(ctx context.Context, ref informerRef, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if ref.obj != nil {
		return c.Cache.GetInformer(ctx, ref.obj, opts...)
	}
	return c.Cache.GetInformerForKind(ctx, ref.gvk, opts...)
}

func (c *syncCache) remember(ref informerRef) {
	var key string
	switch o := ref.obj.(type) {
	case nil:
		key = "kind:" + ref.gvk.String()
	case *unstructured.Unstructured:
		key = "unstructured:" + o.GroupVersionKind().String()
	case *metav1.PartialObjectMetadata:
		key = "metadata:" + o.GroupVersionKind().String()
	default:
		key = fmt.Sprintf("%T", o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[key]; !ok {
		c.seen[key] = ref
	}
}

func (c *syncCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.remember(informerRef{obj: obj})
	return c.Cache.GetInformer(ctx, obj, opts...)
}

func (c *syncCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.remember(informerRef{gvk: gvk})
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

func (c *syncCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	c.remember(informerRef{obj: obj})
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// WaitForCacheSync blocks until every informer asked for through c has
// listed its objects, woken by the informers themselves, then lets the
// wrapped cache confirm (at once when nothing else is pending). It returns
// false when ctx ends first.
func (c *syncCache) WaitForCacheSync(ctx context.Context) bool {
	c.mu.Lock()
	refs := make([]informerRef, 0, len(c.seen))
	for _, r := range c.seen {
		refs = append(refs, r)
	}
	c.mu.Unlock()
	checkers := make([]toolscache.DoneChecker, 0, len(refs))
	for _, r := range refs {
		inf, err := c.get(ctx, r, cache.BlockUntilSynced(false))
		if err != nil {
			// The wrapped cache reports it below, as it always did.
			continue
		}
		if sc, ok := inf.(interface{ HasSyncedChecker() toolscache.DoneChecker }); ok {
			checkers = append(checkers, sc.HasSyncedChecker())
		}
	}
	if !toolscache.WaitFor(ctx, "", checkers...) {
		return false
	}
	return c.Cache.WaitForCacheSync(ctx)
}

// Prestart asks c for the informers of objs without waiting for them, so
// that they are running when the manager starts its caches.
func Prestart(ctx context.Context, c cache.Cache, objs ...client.Object) error {
	for _, o := range objs {
		if _, err := c.GetInformer(ctx, o, cache.BlockUntilSynced(false)); err != nil {
			return fmt.Errorf("informer for %T: %w", o, err)
		}
	}
	return nil
}
