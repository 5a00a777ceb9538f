// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
)

// The kubelet's eviction manager, for what a simulated node can see: a
// container that writes more to its writable layer than its
// ephemeral-storage limit gets its Pod evicted (Failed, reason Evicted),
// as the kubelet's local storage eviction does. Memory and node-level
// pressure are not simulated.

// reasonEvicted is the kubelet's Pod status reason for an eviction.
const reasonEvicted = "Evicted"

// evictionPeriod is how often a limited container's usage is measured
// (the kubelet's --housekeeping-interval is 10 s).
const evictionPeriod = 2 * time.Second

// ephemeralStorageExceeded is the kubelet's eviction message when a
// container's use of its writable layer, used bytes, is over its
// ephemeral-storage limit; "" when it is not, or when it has no limit.
func ephemeralStorageExceeded(c corev1.Container, used int64) string {
	limit, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]
	if !ok || used <= limit.Value() {
		return ""
	}
	return fmt.Sprintf("Container %s exceeded its local ephemeral storage limit %q. ", c.Name, limit.String())
}

// watchEphemeralStorage evicts the Pod once the container, while it runs
// (ctx), uses more than its ephemeral-storage limit; it returns at once
// for a container without one.
func (p *Pod) watchEphemeralStorage(ctx context.Context, c corev1.Container, proc *container.Container) {
	if _, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; !ok {
		return
	}
	t := time.NewTicker(evictionPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		used, err := proc.WritableLayerUsage()
		if err != nil {
			continue // the process just ended
		}
		if msg := ephemeralStorageExceeded(c, used); msg != "" {
			p.evict(msg)
			return
		}
	}
}

// evict fails the Pod for good with reason Evicted and msg; its status
// then says so and the Pod is stopped as a finished one.
func (p *Pod) evict(msg string) {
	p.mu.Lock()
	already := p.evicted != ""
	if !already {
		p.evicted = msg
	}
	p.mu.Unlock()
	if already {
		return
	}
	p.r.opts.Log.Info("Evicting a Pod", "pod", p.key, "message", msg)
	p.event(corev1.EventTypeWarning, reasonEvicted, "Evict", "%s", msg)
	p.changed()
}
