// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// pendingChange is the oldest change of a Service's inputs that no slice
// write has reflected yet.
type pendingChange struct {
	// trigger is the change's own time, for the
	// endpoints.kubernetes.io/last-change-trigger-time annotation.
	trigger time.Time
	// observed is when this controller saw it, for the latency histogram.
	observed time.Time
}

// changeTracker collects pendingChanges per Service between syncs.
type changeTracker struct {
	mu      sync.Mutex
	pending map[types.NamespacedName]pendingChange
}

func newChangeTracker() *changeTracker {
	return &changeTracker{pending: map[types.NamespacedName]pendingChange{}}
}

func (c *changeTracker) observe(svc types.NamespacedName, trigger, observed time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[svc]
	if !ok {
		c.pending[svc] = pendingChange{trigger: trigger, observed: observed}
		return
	}
	if trigger.Before(p.trigger) {
		p.trigger = trigger
	}
	if observed.Before(p.observed) {
		p.observed = observed
	}
	c.pending[svc] = p
}

// take returns and clears the pending change of a Service.
func (c *changeTracker) take(svc types.NamespacedName) (pendingChange, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[svc]
	delete(c.pending, svc)
	return p, ok
}

// restore puts back a change that a failed sync did not write.
func (c *changeTracker) restore(svc types.NamespacedName, p pendingChange) {
	c.observe(svc, p.trigger, p.observed)
}
