// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"context"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// selectorIndex finds the Services that this controller publishes whose
// selector matches a Pod's labels, without visiting every Service of the
// namespace: each selector is filed under one of its own label pairs (the
// smallest key), which any matching Pod must carry, so a Pod event looks up
// only its own labels and checks the few selectors filed there. With 500
// Services in a namespace that is a handful of map lookups per Pod event
// instead of 500 selector comparisons.
type selectorIndex struct {
	mu   sync.RWMutex
	byNS map[string]*nsSelectors
}

type nsSelectors struct {
	selectors map[string]map[string]string      // Service name -> selector
	byPair    map[labelPair]map[string]struct{} // filing pair -> Service names
}

type labelPair struct{ key, value string }

// filingPair is the pair a non-empty selector is filed under.
func filingPair(sel map[string]string) labelPair {
	first := true
	var p labelPair
	for k, v := range sel {
		if first || k < p.key {
			p, first = labelPair{k, v}, false
		}
	}
	return p
}

func newSelectorIndex() *selectorIndex {
	return &selectorIndex{byNS: map[string]*nsSelectors{}}
}

func (x *selectorIndex) set(svc *corev1.Service) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(svc.Namespace, svc.Name)
	if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	ns := x.byNS[svc.Namespace]
	if ns == nil {
		ns = &nsSelectors{selectors: map[string]map[string]string{}, byPair: map[labelPair]map[string]struct{}{}}
		x.byNS[svc.Namespace] = ns
	}
	sel := maps.Clone(svc.Spec.Selector)
	ns.selectors[svc.Name] = sel
	p := filingPair(sel)
	if ns.byPair[p] == nil {
		ns.byPair[p] = map[string]struct{}{}
	}
	ns.byPair[p][svc.Name] = struct{}{}
}

func (x *selectorIndex) remove(namespace, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.removeLocked(namespace, name)
}

func (x *selectorIndex) removeLocked(namespace, name string) {
	ns := x.byNS[namespace]
	if ns == nil {
		return
	}
	sel, ok := ns.selectors[name]
	if !ok {
		return
	}
	delete(ns.selectors, name)
	p := filingPair(sel)
	delete(ns.byPair[p], name)
	if len(ns.byPair[p]) == 0 {
		delete(ns.byPair, p)
	}
	if len(ns.selectors) == 0 {
		delete(x.byNS, namespace)
	}
}

// matching calls f once with the name of every Service of the namespace
// whose selector matches one of the label sets.
func (x *selectorIndex) matching(namespace string, f func(name string), labelSets ...map[string]string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ns := x.byNS[namespace]
	if ns == nil {
		return
	}
	var called map[string]bool // only when a Service could match two sets
	for i, l := range labelSets {
		for k, v := range l {
			for name := range ns.byPair[labelPair{k, v}] {
				if !selectorMatches(ns.selectors[name], l) || called[name] {
					continue
				}
				if i < len(labelSets)-1 {
					if called == nil {
						called = map[string]bool{}
					}
					called[name] = true
				}
				f(name)
			}
		}
	}
}

// servicePredicate records when Service changes are seen, for the
// change-to-write latency, keeps the selector index, and drops updates that cannot
// change any slice (status only).
func servicePredicate(r *Reconciler) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool {
			if svc, ok := e.Object.(*corev1.Service); ok {
				r.selectors.set(svc)
			}
			r.changes.observe(client.ObjectKeyFromObject(e.Object), r.clock.Now())
			return true
		},
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldSvc, ok1 := e.ObjectOld.(*corev1.Service)
			newSvc, ok2 := e.ObjectNew.(*corev1.Service)
			if ok2 {
				r.selectors.set(newSvc)
			}
			if ok1 && ok2 && equality.Semantic.DeepEqual(oldSvc.Spec, newSvc.Spec) &&
				maps.Equal(oldSvc.Labels, newSvc.Labels) && maps.Equal(oldSvc.Annotations, newSvc.Annotations) &&
				(oldSvc.DeletionTimestamp == nil) == (newSvc.DeletionTimestamp == nil) {
				return false
			}
			r.changes.observe(client.ObjectKeyFromObject(e.ObjectNew), r.clock.Now())
			return true
		},
		DeleteFunc: func(e event.DeleteEvent) bool {
			r.selectors.remove(e.Object.GetNamespace(), e.Object.GetName())
			return true
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// podHandler queues the Services whose selector matches a Pod, before and
// after a change, waiting the batch period so bursts are written together.
type podHandler struct{ r *Reconciler }

func (h *podHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	if pod, ok := e.Object.(*corev1.Pod); ok {
		h.enqueue(ctx, q, pod, nil)
	}
}

func (h *podHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
	newPod, ok2 := e.ObjectNew.(*corev1.Pod)
	if !ok1 || !ok2 || !podEndpointChanged(oldPod, newPod) {
		return
	}
	h.enqueue(ctx, q, newPod, oldPod)
}

func (h *podHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	if pod, ok := e.Object.(*corev1.Pod); ok {
		h.enqueue(ctx, q, pod, nil)
	}
}

func (h *podHandler) Generic(context.Context, event.TypedGenericEvent[client.Object], queue) {}

func (h *podHandler) enqueue(_ context.Context, q queue, pod, oldPod *corev1.Pod) {
	now := h.r.clock.Now()
	var oldLabels map[string]string
	if oldPod != nil {
		oldLabels = oldPod.Labels
	}
	h.r.selectors.matching(pod.Namespace, func(name string) {
		key := types.NamespacedName{Namespace: pod.Namespace, Name: name}
		h.r.changes.observe(key, now)
		req := reconcile.Request{NamespacedName: key}
		if h.r.opts.BatchPeriod > 0 {
			q.AddAfter(req, h.r.opts.BatchPeriod)
		} else {
			q.Add(req)
		}
	}, pod.Labels, oldLabels)
}

// podEndpointChanged reports whether a Pod update can change its endpoint.
func podEndpointChanged(oldPod, newPod *corev1.Pod) bool {
	switch {
	case !maps.Equal(oldPod.Labels, newPod.Labels),
		oldPod.Status.PodIP != newPod.Status.PodIP,
		!equality.Semantic.DeepEqual(oldPod.Status.PodIPs, newPod.Status.PodIPs),
		oldPod.Status.Phase != newPod.Status.Phase,
		podReady(oldPod) != podReady(newPod),
		(oldPod.DeletionTimestamp == nil) != (newPod.DeletionTimestamp == nil),
		oldPod.Spec.NodeName != newPod.Spec.NodeName,
		oldPod.Spec.Hostname != newPod.Spec.Hostname,
		oldPod.Spec.Subdomain != newPod.Spec.Subdomain:
		return true
	}
	return !equality.Semantic.DeepEqual(containerPorts(oldPod), containerPorts(newPod))
}

func containerPorts(pod *corev1.Pod) [][]corev1.ContainerPort {
	var out [][]corev1.ContainerPort
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Ports)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Ports)
	}
	return out
}

// nodeHandler re-syncs Services when a Node's zone, readiness or CPU
// changes: endpoint zones and topology hints depend on them.
type nodeHandler struct{ r *Reconciler }

func (h *nodeHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	if n, ok := e.Object.(*corev1.Node); ok {
		h.r.nodes.set(n.Name, nodeInfoOf(n))
	}
	h.all(ctx, q)
}

func (h *nodeHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	oldNode, ok1 := e.ObjectOld.(*corev1.Node)
	newNode, ok2 := e.ObjectNew.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	info := nodeInfoOf(newNode)
	if nodeInfoOf(oldNode) == info {
		return
	}
	h.r.nodes.set(newNode.Name, info)
	h.all(ctx, q)
}

func (h *nodeHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	h.r.nodes.remove(e.Object.GetName())
	h.all(ctx, q)
}

func (h *nodeHandler) Generic(context.Context, event.TypedGenericEvent[client.Object], queue) {}

// nodeResyncDelay spreads the re-sync after a Node change, which is rare
// but touches every Service.
const nodeResyncDelay = time.Second

func (h *nodeHandler) all(ctx context.Context, q queue) {
	var services corev1.ServiceList
	if err := h.r.client.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range services.Items {
		svc := &services.Items[i]
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		q.AddAfter(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}}, nodeResyncDelay)
	}
}
