// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
)

var (
	descCapacity = prometheus.NewDesc("svcnet_loadbalancer_pool_capacity",
		"Addresses each LoadBalancerIPPool can give.", []string{"pool"}, nil)
	descAllocated = prometheus.NewDesc("svcnet_loadbalancer_pool_allocated",
		"Addresses of each LoadBalancerIPPool held by Services.", []string{"pool"}, nil)
	metricExhausted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_loadbalancer_pool_exhausted_total",
		Help: "Allocations that found no free address, counted for every pool the Service could use.",
	}, []string{"pool"})
	registerOnce sync.Once
)

// usageCollector reads the allocator at scrape time, so the series of a
// deleted pool disappear with it. A restarted controller (tests) takes
// over the registration.
type usageCollector struct {
	mu    sync.Mutex
	alloc *lbipam.Allocator
}

var usage = &usageCollector{}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCapacity
	ch <- descAllocated
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	alloc := c.alloc
	c.mu.Unlock()
	if alloc == nil {
		return
	}
	for name, st := range alloc.Stats() {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, float64(st.Capacity), name)
		ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, float64(st.Allocated), name)
	}
}

func registerMetrics(alloc *lbipam.Allocator) {
	usage.mu.Lock()
	usage.alloc = alloc
	usage.mu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(metricExhausted, usage) })
}
