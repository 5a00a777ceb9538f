// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The metrics mirror kube-controller-manager's endpoint_slice_controller_*
// family under the svcnet_endpointslice_ prefix, so dashboards translate
// one to one, plus the Pod-change-to-write latency upstream lacks.
var (
	metricEndpointsDesired = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "svcnet_endpointslice_endpoints_desired",
		Help: "Number of endpoints desired over all Services.",
	})
	metricSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "svcnet_endpointslice_num_endpoint_slices",
		Help: "Number of EndpointSlices managed over all Services.",
	})
	metricEndpointsAdded = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_endpointslice_endpoints_added_per_sync",
		Help:    "Number of endpoints added on each Service sync.",
		Buckets: prometheus.ExponentialBuckets(2, 2, 15),
	})
	metricEndpointsRemoved = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_endpointslice_endpoints_removed_per_sync",
		Help:    "Number of endpoints removed on each Service sync.",
		Buckets: prometheus.ExponentialBuckets(2, 2, 15),
	})
	metricChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_endpointslice_changes",
		Help: "Number of EndpointSlice writes, by operation (create, update, delete).",
	}, []string{"operation"})
	metricSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_endpointslice_syncs",
		Help: "Number of Service syncs, by result (success, stale, error).",
	}, []string{"result"})
	metricChangeToWrite = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_endpointslice_change_to_write_seconds",
		Help:    "Time from observing a Pod or Service change to the EndpointSlice write that reflects it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricEndpointsDesired, metricSlices, metricEndpointsAdded,
			metricEndpointsRemoved, metricChanges, metricSyncs, metricChangeToWrite)
	})
}
