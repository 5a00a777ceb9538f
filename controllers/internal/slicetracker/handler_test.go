// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package slicetracker

import (
	"context"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

const ours = "ours.example.com"

func ownsTest(s *discoveryv1.EndpointSlice) bool { return s.Labels[discoveryv1.LabelManagedBy] == ours }

func ownedSlice(uid, svc, rv string) *discoveryv1.EndpointSlice {
	s := sliceRV(uid, 1, rv)
	s.Namespace = "ns"
	s.Labels = map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: ours}
	return s
}

func relabel(s *discoveryv1.EndpointSlice, key, value, rv string) *discoveryv1.EndpointSlice {
	c := s.DeepCopy()
	c.Labels = maps.Clone(s.Labels)
	c.Labels[key] = value
	c.ResourceVersion = rv
	return c
}

// drain returns the Services queued, in order.
func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var out []string
	for q.Len() > 0 {
		item, _ := q.Get()
		out = append(out, item.String())
		q.Done(item)
	}
	return out
}

func TestHandler(t *testing.T) {
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	written := ownedSlice("a", "web", "10")
	cases := map[string]struct {
		fire        func(h *Handler, q queue)
		wantQueued  []string
		wantRepairs map[string][]string // Service -> reasons
		// wantDropped: slice a no longer holds web's syncs.
		wantDropped bool
	}{
		"our own update": {
			fire: func(h *Handler, q queue) {
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: written, ObjectNew: written}, q)
			},
		},
		"our own update while web waits for its cache: a sync, no repair": {
			fire: func(h *Handler, q queue) {
				h.tracker.Stale(web, nil)
				newer := written.DeepCopy()
				newer.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}}}
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: ownedSlice("a", "web", "9"), ObjectNew: newer}, q)
			},
			wantQueued: []string{"ns/web"},
		},
		"an edit of the endpoints by someone else": {
			fire: func(h *Handler, q queue) {
				edited := written.DeepCopy()
				edited.ResourceVersion, edited.Generation = "11", 2
				edited.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}}}
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: written, ObjectNew: edited}, q)
			},
			wantQueued:  []string{"ns/web"},
			wantRepairs: map[string][]string{"ns/web": {repairs.ReasonEdited}},
		},
		"a deletion by someone else": {
			fire: func(h *Handler, q queue) {
				h.Delete(context.Background(), event.TypedDeleteEvent[client.Object]{Object: written}, q)
			},
			wantQueued:  []string{"ns/web"},
			wantRepairs: map[string][]string{"ns/web": {repairs.ReasonDeleted}},
			wantDropped: true,
		},
		"managed-by changed": {
			fire: func(h *Handler, q queue) {
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: written, ObjectNew: relabel(written, discoveryv1.LabelManagedBy, "someone-else", "11")}, q)
			},
			wantQueued:  []string{"ns/web"},
			wantRepairs: map[string][]string{"ns/web": {repairs.ReasonDisowned}},
			wantDropped: true,
		},
		"service-name changed": {
			fire: func(h *Handler, q queue) {
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: written, ObjectNew: relabel(written, discoveryv1.LabelServiceName, other.Name, "11")}, q)
			},
			wantQueued:  []string{"ns/web", "ns/other"},
			wantRepairs: map[string][]string{"ns/web": {repairs.ReasonDisowned}},
			wantDropped: true,
		},
		"a foreign slice": {
			fire: func(h *Handler, q queue) {
				foreign := relabel(ownedSlice("f", "web", "3"), discoveryv1.LabelManagedBy, "someone-else", "3")
				h.Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: foreign}, q)
				h.Delete(context.Background(), event.TypedDeleteEvent[client.Object]{Object: foreign}, q)
			},
		},
		"a foreign slice becomes ours": {
			fire: func(h *Handler, q queue) {
				foreign := relabel(ownedSlice("f", "web", "3"), discoveryv1.LabelManagedBy, "someone-else", "3")
				h.Update(context.Background(), event.TypedUpdateEvent[client.Object]{ObjectOld: foreign, ObjectNew: ownedSlice("f", "web", "4")}, q)
			},
			wantQueued: []string{"ns/web"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			tr := New(ownsTest)
			h := tr.Handler()
			tr.Record(web, written)
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			tc.fire(h, q)
			if diff := cmp.Diff(tc.wantQueued, drain(q)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
			got := map[string][]string{}
			for _, key := range []types.NamespacedName{web, other} {
				for _, c := range tr.Repaired(key) {
					got[key.String()] = append(got[key.String()], c.Reason)
				}
			}
			if diff := cmp.Diff(tc.wantRepairs, got, cmpEmptyMap); diff != "" {
				t.Errorf("repairs noted (-want +got):\n%s", diff)
			}
			if dropped := !tr.Tracked(web, written); dropped != tc.wantDropped {
				t.Errorf("slice a dropped: %v, want %v", dropped, tc.wantDropped)
			}
		})
	}
}

var cmpEmptyMap = cmp.FilterValues(func(a, b map[string][]string) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

func TestDescribe(t *testing.T) {
	a := ownedSlice("a", "web", "1")
	b := relabel(a, discoveryv1.LabelManagedBy, "x", "2")
	b.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}
	if got, want := Describe(a, b), "labels endpointslice.kubernetes.io/managed-by; endpoints"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if got := Describe(a, a); got != "" {
		t.Errorf("Describe of equal slices = %q, want nothing", got)
	}
}
