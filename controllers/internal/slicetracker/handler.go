// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package slicetracker

import (
	"context"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// Kind is the kind repairs of slices are reported under.
const Kind = "EndpointSlice"

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// Handler is the EndpointSlice event handler of a controller that writes
// slices through a Tracker. It queues the Service (the slice's namespace
// and kubernetes.io/service-name) of a slice the controller owns whenever
// the event is not its own write; it forgets the slices that someone else
// deleted or took out of the controller's ownership; and it notes those
// changes, which the Service's next sync reports once it has written the
// repair (Tracker.Repaired).
type Handler struct {
	tracker *Tracker
}

var _ handler.TypedEventHandler[client.Object, reconcile.Request] = (*Handler)(nil)

// serviceOf returns the Service of a slice the controller owns.
func (h *Handler) serviceOf(obj client.Object) (*discoveryv1.EndpointSlice, types.NamespacedName, bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelServiceName] == "" || !h.tracker.owns(s) {
		return nil, types.NamespacedName{}, false
	}
	return s, types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}, true
}

// Create queues the Service of a slice the controller did not write
// (after a restart, every slice).
func (h *Handler) Create(_ context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	if s, key, ok := h.serviceOf(e.Object); ok && (!h.tracker.OwnWrite(key, s) || h.tracker.Waiting(key)) {
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

// Update queues the Service of a slice another writer changed, and both
// Services when the slice changed hands.
func (h *Handler) Update(_ context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	oldSlice, oldKey, oldOwned := h.serviceOf(e.ObjectOld)
	newSlice, newKey, newOwned := h.serviceOf(e.ObjectNew)
	if oldOwned && (!newOwned || oldKey != newKey) {
		// The slice left this controller or this Service: the Service must
		// not wait for it, and needs its endpoints written anew.
		h.tracker.Drop(oldKey, oldSlice.UID)
		h.note(oldKey, repairs.ReasonDisowned, e.ObjectOld, e.ObjectNew)
		q.Add(reconcile.Request{NamespacedName: oldKey})
	}
	if !newOwned {
		return
	}
	if oldOwned && oldKey == newKey {
		switch {
		case !h.tracker.OwnWrite(newKey, newSlice):
			h.note(newKey, repairs.ReasonEdited, e.ObjectOld, e.ObjectNew)
		case !h.tracker.Waiting(newKey):
			return
		}
		// The controller's own write still syncs a Service waiting for its
		// cache, and is no repair.
	}
	q.Add(reconcile.Request{NamespacedName: newKey})
}

// Delete queues the Service of a slice the controller owned unless the
// controller deleted it itself.
func (h *Handler) Delete(_ context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	s, key, ok := h.serviceOf(e.Object)
	if !ok {
		return
	}
	if _, expected := h.tracker.ObservedDeletion(key, s); expected {
		return
	}
	h.tracker.repairs.Note(key, repairs.Change{Kind: Kind, Object: klog.KObj(s), Reason: repairs.ReasonDeleted})
	q.Add(reconcile.Request{NamespacedName: key})
}

// Generic events are not used.
func (h *Handler) Generic(context.Context, event.TypedGenericEvent[client.Object], queue) {}

// note records another writer's change of a slice for the Service's next
// sync, when it touched what the controller writes.
func (h *Handler) note(key types.NamespacedName, reason string, oldObj, newObj client.Object) {
	oldSlice, ok1 := oldObj.(*discoveryv1.EndpointSlice)
	newSlice, ok2 := newObj.(*discoveryv1.EndpointSlice)
	if !ok1 || !ok2 {
		return
	}
	what := Describe(oldSlice, newSlice)
	if what == "" {
		return
	}
	h.tracker.repairs.Note(key, repairs.Change{Kind: Kind, Object: klog.KObj(newSlice), Reason: reason, What: what})
}

// Describe says which parts of a slice that its controller writes differ
// between two versions: the labels that changed, by key, then the
// annotations, ownerReferences, ports and endpoints. It returns "" when
// none did.
func Describe(oldSlice, newSlice *discoveryv1.EndpointSlice) string {
	var parts []string
	if keys := changedKeys(oldSlice.Labels, newSlice.Labels); len(keys) > 0 {
		parts = append(parts, "labels "+strings.Join(keys, ","))
	}
	if keys := changedKeys(oldSlice.Annotations, newSlice.Annotations); len(keys) > 0 {
		parts = append(parts, "annotations "+strings.Join(keys, ","))
	}
	if !equality.Semantic.DeepEqual(oldSlice.OwnerReferences, newSlice.OwnerReferences) {
		parts = append(parts, "ownerReferences")
	}
	if !equality.Semantic.DeepEqual(oldSlice.Ports, newSlice.Ports) {
		parts = append(parts, "ports")
	}
	if !equality.Semantic.DeepEqual(oldSlice.Endpoints, newSlice.Endpoints) {
		parts = append(parts, "endpoints")
	}
	return strings.Join(parts, "; ")
}

// changedKeys returns the keys whose values differ between two maps, sorted.
func changedKeys(a, b map[string]string) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
