// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

var (
	descCapacity = prometheus.NewDesc("svcnet_loadbalancer_pool_capacity",
		"Addresses each LoadBalancerIPPool can give.", []string{"pool"}, nil)
	descAllocated = prometheus.NewDesc("svcnet_loadbalancer_pool_allocated",
		"Addresses of each LoadBalancerIPPool held by Services.", []string{"pool"}, nil)
	descAnnounced = prometheus.NewDesc("svcnet_loadbalancer_announced",
		"1 while a node announces the LoadBalancer Service's addresses, 0 when none may (its svcnet.io/LoadBalancerAnnounced condition); absent for Services no L2 announcement covers.", []string{"namespace", "service"}, nil)
	metricExhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_loadbalancer_pool_exhausted_total",
		Help: "Allocations that found no free address, counted for every pool the Service could use.",
	}, []string{"pool"})
	registerOnce sync.Once
)

// usageCollector reads the allocator and the cached Services at scrape
// time, so the series of a deleted pool or Service disappear with it. A
// restarted controller (tests) takes over the registration.
type usageCollector struct {
	mu       sync.Mutex
	alloc    *lbipam.Allocator
	services client.Reader
}

// listTimeout bounds a scrape's read of the cache (it waits while the
// cache is not yet in sync).
const listTimeout = 5 * time.Second

var usage = &usageCollector{}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCapacity
	ch <- descAllocated
	ch <- descAnnounced
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	alloc, services := c.alloc, c.services
	c.mu.Unlock()
	if alloc != nil {
		for name, st := range alloc.Stats() {
			ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(st.Capacity), name)
			ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, float64(st.Allocated), name)
		}
	}
	if services != nil {
		collectAnnounced(services, ch)
	}
}

// collectAnnounced exports each LoadBalancer Service's announcement
// condition; a cache that cannot be read leaves the series out of this
// scrape.
func collectAnnounced(services client.Reader, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	// Read only: the cache's objects, not copies of every Service at every
	// scrape.
	var list corev1.ServiceList
	if err := services.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		cond := apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
		if cond == nil {
			continue
		}
		v := 0.0
		if cond.Status == metav1.ConditionTrue {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descAnnounced, prometheus.GaugeValue, v, svc.Namespace, svc.Name)
	}
}

func registerMetrics(alloc *lbipam.Allocator, services client.Reader) {
	usage.mu.Lock()
	usage.alloc, usage.services = alloc, services
	usage.mu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(metricExhausted, usage) })
}
