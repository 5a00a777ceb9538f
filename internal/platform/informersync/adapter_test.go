// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package informersync

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestAdapter checks how informer notifications become handler events:
// tombstones are unwrapped and flagged, predicates filter every kind of
// event, and objects of the wrong type are dropped.
func TestAdapter(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	}
	notSkip := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() != "skip" })
	rec := &recorder{}
	a := &adapter[client.Object]{ctx: context.Background(), h: rec, predicates: []predicate.TypedPredicate[client.Object]{notSkip}}

	a.OnAdd(pod("a"), true)
	a.OnAdd(pod("skip"), false)
	a.OnAdd("not an object", false)
	a.OnUpdate(pod("a"), pod("b"))
	a.OnUpdate(pod("a"), "not an object")
	a.OnUpdate(pod("skip"), pod("skip"))
	a.OnDelete(pod("c"))
	a.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/d", Obj: pod("d")})
	a.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/skip", Obj: pod("skip")})
	a.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/e", Obj: "not an object"})

	want := &recorder{
		creates: []string{"a (initial list)"},
		updates: []string{"a->b"},
		deletes: []string{"c", "d (state unknown)"},
	}
	if diff := cmp.Diff(want, rec, cmp.AllowUnexported(recorder{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// recorder keeps the events a handler was given.
type recorder struct {
	creates, updates, deletes []string
}

func (r *recorder) Create(_ context.Context, e event.TypedCreateEvent[client.Object], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	name := e.Object.GetName()
	if e.IsInInitialList {
		name += " (initial list)"
	}
	r.creates = append(r.creates, name)
}

func (r *recorder) Update(_ context.Context, e event.TypedUpdateEvent[client.Object], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.updates = append(r.updates, e.ObjectOld.GetName()+"->"+e.ObjectNew.GetName())
}

func (r *recorder) Delete(_ context.Context, e event.TypedDeleteEvent[client.Object], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	name := e.Object.GetName()
	if e.DeleteStateUnknown {
		name += " (state unknown)"
	}
	r.deletes = append(r.deletes, name)
}

func (r *recorder) Generic(context.Context, event.TypedGenericEvent[client.Object], workqueue.TypedRateLimitingInterface[reconcile.Request]) {
}
