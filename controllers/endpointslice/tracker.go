// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// changeTracker remembers, per Service, when this controller first saw a
// change that no slice write has reflected yet, for
// svcnet_endpointslice_change_to_write_seconds.
type changeTracker struct {
	mu      sync.Mutex
	pending map[types.NamespacedName]time.Time
}

func newChangeTracker() *changeTracker {
	return &changeTracker{pending: map[types.NamespacedName]time.Time{}}
}

func (c *changeTracker) observe(svc types.NamespacedName, observed time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pending[svc]; !ok || observed.Before(p) {
		c.pending[svc] = observed
	}
}

// take returns and clears the pending change of a Service.
func (c *changeTracker) take(svc types.NamespacedName) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[svc]
	delete(c.pending, svc)
	return p, ok
}

// restore puts back a change that a failed sync did not write.
func (c *changeTracker) restore(svc types.NamespacedName, observed time.Time) {
	c.observe(svc, observed)
}

// triggerState is what the trigger-time tracker knows of a Service from
// its last sync: the trigger times it saw then.
type triggerState struct {
	service time.Time
	pods    map[string]time.Time
}

// computeTriggerTime is kube-controller-manager's
// TriggerTimeTracker.ComputeEndpointLastChangeTriggerTime
// (k8s.io/endpointslice/util): the value of
// endpoints.kubernetes.io/last-change-trigger-time for this sync, and the
// state to remember for the next one. A Service the tracker has not seen
// yet (known false) gets its creation time. Otherwise the value is the
// earliest trigger time that is newer than the last sync saw: a Pod's
// Ready condition transition (Pods without one have no trigger time), or
// the Service's creation (it changes only when the Service was re-created
// in between). Nothing else counts, so a sync caused by anything else
// returns the zero time, and the annotation is removed from the slices it
// writes.
func computeTriggerTime(prev triggerState, known bool, svc *corev1.Service, pods []*corev1.Pod) (time.Time, triggerState) {
	var earliest time.Time
	next := triggerState{service: svc.CreationTimestamp.Time, pods: make(map[string]time.Time, len(pods))}
	consider := func(t time.Time) {
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	for _, pod := range pods {
		t := podTriggerTime(pod)
		if t.IsZero() {
			continue
		}
		next.pods[pod.Name] = t
		if t.After(prev.pods[pod.Name]) {
			consider(t)
		}
	}
	if next.service.After(prev.service) {
		consider(next.service)
	}
	if !known {
		return svc.CreationTimestamp.Time, next
	}
	return earliest, next
}

// podTriggerTime is the time of a Pod's last change that changes its
// endpoint, as upstream sees it: the Ready condition's last transition, or
// zero when the Pod has no Ready condition.
func podTriggerTime(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// triggerTimeTracker keeps each Service's triggerState between syncs.
// Like upstream's, it is safe for concurrent use by syncs of different
// Services; the work queue never runs two syncs of one Service at once.
type triggerTimeTracker struct {
	mu     sync.Mutex
	states map[types.NamespacedName]triggerState
}

func newTriggerTimeTracker() *triggerTimeTracker {
	return &triggerTimeTracker{states: map[types.NamespacedName]triggerState{}}
}

// compute returns the trigger time of a sync of svc over pods and
// remembers what it saw, as upstream does before it writes anything: a
// sync that then fails does not report the same change again.
func (t *triggerTimeTracker) compute(key types.NamespacedName, svc *corev1.Service, pods []*corev1.Pod) time.Time {
	t.mu.Lock()
	prev, known := t.states[key]
	t.mu.Unlock()
	trigger, next := computeTriggerTime(prev, known, svc, pods)
	t.mu.Lock()
	t.states[key] = next
	t.mu.Unlock()
	return trigger
}

// forget drops a deleted Service.
func (t *triggerTimeTracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.states, key)
}
