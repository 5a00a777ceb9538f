// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The metrics are kube-controller-manager's endpoint_slice_controller_*
// series (k8s.io/endpointslice/metrics, v1.37), with the same names, help
// (stability prefix included), labels and buckets, observed at the same
// points of a sync, so that dashboards, alerts and recording rules written
// for kube-controller-manager keep working. svcnet adds one series of its
// own, the change-to-write latency upstream lacks.
const subsystem = "endpoint_slice_controller"

var (
	metricEndpointsAdded = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem,
		Name:      "endpoints_added_per_sync",
		Help:      "[BETA] Number of endpoints added on each Service sync",
		Buckets:   prometheus.ExponentialBuckets(2, 2, 15),
	})
	metricEndpointsRemoved = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem,
		Name:      "endpoints_removed_per_sync",
		Help:      "[BETA] Number of endpoints removed on each Service sync",
		Buckets:   prometheus.ExponentialBuckets(2, 2, 15),
	})
	metricEndpointsDesired = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem,
		Name:      "endpoints_desired",
		Help:      "[BETA] Number of endpoints desired",
	})
	metricSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem,
		Name:      "num_endpoint_slices",
		Help:      "[BETA] Number of EndpointSlices",
	})
	metricDesiredSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem,
		Name:      "desired_endpoint_slices",
		Help:      "[BETA] Number of EndpointSlices that would exist with perfect endpoint allocation",
	})
	metricChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: subsystem,
		Name:      "changes",
		Help:      "[ALPHA] Number of EndpointSlice changes",
	}, []string{"operation"})
	// Upstream gives this one no buckets: Prometheus' defaults.
	metricSlicesChanged = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: subsystem,
		Name:      "endpointslices_changed_per_sync",
		Help:      "[ALPHA] Number of EndpointSlices changed on each Service sync",
	}, []string{"topology", "traffic_distribution"})
	metricSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: subsystem,
		Name:      "syncs",
		Help:      "[ALPHA] Number of EndpointSlice syncs",
	}, []string{"result"})
	metricServicesByTrafficDistribution = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: subsystem,
		Name:      "services_count_by_traffic_distribution",
		Help:      "[BETA] Number of Services using some specific trafficDistribution",
	}, []string{"traffic_distribution"})

	metricChangeToWrite = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_endpointslice_change_to_write_seconds",
		Help:    "Time from observing a Pod or Service change to the EndpointSlice write that reflects it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricEndpointsAdded, metricEndpointsRemoved, metricEndpointsDesired,
			metricSlices, metricDesiredSlices, metricChanges, metricSlicesChanged, metricSyncs,
			metricServicesByTrafficDistribution, metricChangeToWrite)
	})
}

// serviceStats is what one Service contributes to the gauges.
type serviceStats struct {
	// endpoints counts the desired endpoints, slices the slices the
	// Service has after the sync, desiredSlices the slices it would have
	// with perfect packing (ceil(endpoints/max) per port set, and one
	// placeholder per family without endpoints).
	endpoints, slices, desiredSlices int
	// trafficDistribution is the Service's spec.trafficDistribution when
	// it decides the hints (valid, and no topology-mode annotation), ""
	// otherwise.
	trafficDistribution string
}

// statsCache holds every Service's serviceStats and keeps the gauges at
// their sums, as upstream's metrics.Cache does.
type statsCache struct {
	mu       sync.Mutex
	services map[types.NamespacedName]serviceStats
	total    serviceStats
}

func newStatsCache() *statsCache {
	return &statsCache{services: map[types.NamespacedName]serviceStats{}}
}

// set records a Service's stats after a sync.
func (c *statsCache) set(key types.NamespacedName, s serviceStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replaceLocked(key, s)
	c.services[key] = s
}

// forget removes a Service that is gone or not published by this
// controller.
func (c *statsCache) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.replaceLocked(key, serviceStats{})
	delete(c.services, key)
}

func (c *statsCache) replaceLocked(key types.NamespacedName, s serviceStats) {
	old := c.services[key]
	c.total.endpoints += s.endpoints - old.endpoints
	c.total.slices += s.slices - old.slices
	c.total.desiredSlices += s.desiredSlices - old.desiredSlices
	metricEndpointsDesired.Set(float64(c.total.endpoints))
	metricSlices.Set(float64(c.total.slices))
	metricDesiredSlices.Set(float64(c.total.desiredSlices))
	if s.trafficDistribution == old.trafficDistribution {
		return
	}
	// Upstream resets the vector and sets every value it still counts, so
	// a value no Service uses any more disappears.
	counts := map[string]int{}
	for k, other := range c.services {
		if k != key && other.trafficDistribution != "" {
			counts[other.trafficDistribution]++
		}
	}
	if s.trafficDistribution != "" {
		counts[s.trafficDistribution]++
	}
	metricServicesByTrafficDistribution.Reset()
	for td, n := range counts {
		metricServicesByTrafficDistribution.WithLabelValues(td).Set(float64(n))
	}
}

// desiredSliceCount is the number of slices n endpoints of one port set
// need at best.
func desiredSliceCount(n, maxPerSlice int) int {
	return (n + maxPerSlice - 1) / maxPerSlice
}
