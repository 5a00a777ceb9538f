// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// stageTracer watches the ReplicaSets, Pods and EndpointSlices of the
// benchmark's namespace and notes when each change arrives, so that a
// scale-up's time can be split into its stages: the Deployment and
// ReplicaSet controllers (kube-controller-manager, both pipelines), the
// simulated kubelet (both pipelines), the EndpointSlice controller and the
// node proxies (the pipelines' own parts).
type stageTracer struct {
	mu     sync.Mutex
	events []stageEvent
	stop   context.CancelFunc
	done   sync.WaitGroup
}

type stageEvent struct {
	at  time.Time
	obj runtime.Object
}

// traceStages starts the watches and returns once they are established.
func traceStages(ctx context.Context, cs kubernetes.Interface, ns string) (*stageTracer, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &stageTracer{stop: cancel}
	opts := metav1.ListOptions{}
	var ws []watch.Interface
	for _, open := range []func() (watch.Interface, error){
		func() (watch.Interface, error) { return cs.AppsV1().ReplicaSets(ns).Watch(ctx, opts) },
		func() (watch.Interface, error) { return cs.CoreV1().Pods(ns).Watch(ctx, opts) },
		func() (watch.Interface, error) { return cs.DiscoveryV1().EndpointSlices(ns).Watch(ctx, opts) },
	} {
		w, err := open()
		if err != nil {
			cancel()
			for _, w := range ws {
				w.Stop()
			}
			return nil, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		t.done.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type == watch.Added || ev.Type == watch.Modified {
						t.mu.Lock()
						t.events = append(t.events, stageEvent{at: time.Now(), obj: ev.Object})
						t.mu.Unlock()
					}
				}
			}
		})
	}
	return t, nil
}

func (t *stageTracer) close() {
	t.stop()
	t.done.Wait()
}

// scaleStages is one scale-up's timeline, each a time since the request.
type scaleStages struct {
	RS      time.Duration `json:"rs"`
	Created time.Duration `json:"created"`
	Bound   time.Duration `json:"bound"`
	Ready   time.Duration `json:"ready"`
	Slice   time.Duration `json:"slice"`
}

// stages finds, among the changes seen since start, when the ReplicaSet
// wanted replicas, when pod was created, bound to a node and Ready, and
// when a slice held its address as ready.
func (t *stageTracer) stages(start time.Time, pod string, replicas int32, ip string) (scaleStages, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s scaleStages
	seen := func(d *time.Duration, at time.Time) {
		if *d == 0 {
			*d = at.Sub(start)
		}
	}
	for _, e := range t.events {
		if e.at.Before(start) {
			continue
		}
		switch o := e.obj.(type) {
		case *appsv1.ReplicaSet:
			if o.Spec.Replicas != nil && *o.Spec.Replicas == replicas {
				seen(&s.RS, e.at)
			}
		case *corev1.Pod:
			if o.Name != pod {
				continue
			}
			seen(&s.Created, e.at)
			if o.Spec.NodeName != "" {
				seen(&s.Bound, e.at)
			}
			for _, c := range o.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					seen(&s.Ready, e.at)
				}
			}
		case *discoveryv1.EndpointSlice:
			for _, ep := range o.Endpoints {
				if len(ep.Addresses) > 0 && ep.Addresses[0] == ip && (ep.Conditions.Ready == nil || *ep.Conditions.Ready) {
					seen(&s.Slice, e.at)
				}
			}
		}
	}
	if s.RS == 0 || s.Created == 0 || s.Bound == 0 || s.Ready == 0 || s.Slice == 0 {
		return s, fmt.Errorf("stages of Pod %s incomplete: %+v", pod, s)
	}
	return s, nil
}

// forget drops the changes seen before t.
func (t *stageTracer) forget(before time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = dropBefore(t.events, func(e stageEvent) time.Time { return e.at }, before)
}
