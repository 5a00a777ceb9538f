// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The metrics are kube-controller-manager's
// endpoint_slice_mirroring_controller_* series
// (pkg/controller/endpointslicemirroring/metrics, v1.37): same names, help
// (stability prefix included), labels and buckets, observed at the same
// points of a sync.
const subsystem = "endpoint_slice_mirroring_controller"

var perSyncBuckets = prometheus.ExponentialBuckets(2, 2, 15)

var (
	metricEndpointsAdded = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "endpoints_added_per_sync",
		Help: "[ALPHA] Number of endpoints added on each Endpoints sync", Buckets: perSyncBuckets,
	})
	metricEndpointsUpdated = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "endpoints_updated_per_sync",
		Help: "[ALPHA] Number of endpoints updated on each Endpoints sync", Buckets: perSyncBuckets,
	})
	metricEndpointsRemoved = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "endpoints_removed_per_sync",
		Help: "[ALPHA] Number of endpoints removed on each Endpoints sync", Buckets: perSyncBuckets,
	})
	metricAddressesSkipped = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "addresses_skipped_per_sync",
		Help:    "[ALPHA] Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset",
		Buckets: perSyncBuckets,
	})
	metricSyncDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: "endpoints_sync_duration",
		Help: "[ALPHA] Duration of syncEndpoints() in seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	})
	metricEndpointsDesired = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem, Name: "endpoints_desired", Help: "[ALPHA] Number of endpoints desired",
	})
	metricSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem, Name: "num_endpoint_slices", Help: "[ALPHA] Number of EndpointSlices",
	})
	metricDesiredSlices = prometheus.NewGauge(prometheus.GaugeOpts{
		Subsystem: subsystem, Name: "desired_endpoint_slices",
		Help: "[ALPHA] Number of EndpointSlices that would exist with perfect endpoint allocation",
	})
	metricChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: subsystem, Name: "changes", Help: "[ALPHA] Number of EndpointSlice changes",
	}, []string{"operation"})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricEndpointsAdded, metricEndpointsUpdated, metricEndpointsRemoved,
			metricAddressesSkipped, metricSyncDuration, metricEndpointsDesired, metricSlices, metricDesiredSlices,
			metricChanges)
	})
}

// totals counts the endpoints a sync adds, updates and removes, as
// upstream's totalsByAction.
type totals struct{ added, updated, removed int }

// mirrorTotals counts like upstream's reconcileByPortMapping: per address
// type and port set of the subsets, against the first existing slice of
// that set (the one kept); a set without addresses removes every endpoint
// of its slices; slices of port sets the subsets no longer have are
// deleted without counting.
func mirrorTotals(m mirror, existing []*discoveryv1.EndpointSlice) totals {
	byKey := slicesByKey(existing)
	var t totals
	for k := range m.portSets {
		ex := byKey[k]
		g := m.groups[k]
		switch {
		case g == nil:
			for _, s := range ex {
				t.removed += len(s.Endpoints)
			}
		case len(ex) == 0:
			t.added += len(g.endpoints)
		default:
			want := make(map[string]int, len(g.endpoints))
			for i, e := range g.endpoints {
				want[e.Addresses[0]] = i
			}
			matched := 0
			for _, e := range ex[0].Endpoints {
				i, ok := -1, len(e.Addresses) > 0
				if ok {
					i, ok = want[e.Addresses[0]]
				}
				if !ok {
					t.removed++
					continue
				}
				matched++
				if !equality.Semantic.DeepEqual(e, g.endpoints[i]) {
					t.updated++
				}
			}
			t.added += len(g.endpoints) - matched
		}
	}
	return t
}

// mirrorStats is what one Endpoints contributes to the gauges: every
// mirrored group is one slice, which is also the perfect packing since a
// group holds at most MaxEndpointsPerSubset endpoints.
type mirrorStats struct{ endpoints, slices int }

func statsOf(m mirror) mirrorStats {
	s := mirrorStats{slices: len(m.groups)}
	for _, g := range m.groups {
		s.endpoints += len(g.endpoints)
	}
	return s
}

// statsCache keeps the gauges at the sums over Endpoints, as upstream's
// metrics.Cache does.
type statsCache struct {
	mu    sync.Mutex
	each  map[types.NamespacedName]mirrorStats
	total mirrorStats
}

func newStatsCache() *statsCache { return &statsCache{each: map[types.NamespacedName]mirrorStats{}} }

func (c *statsCache) set(key types.NamespacedName, s mirrorStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.each[key]
	c.total.endpoints += s.endpoints - old.endpoints
	c.total.slices += s.slices - old.slices
	if s == (mirrorStats{}) {
		delete(c.each, key)
	} else {
		c.each[key] = s
	}
	metricEndpointsDesired.Set(float64(c.total.endpoints))
	metricSlices.Set(float64(c.total.slices))
	metricDesiredSlices.Set(float64(c.total.slices))
}

func (c *statsCache) forget(key types.NamespacedName) { c.set(key, mirrorStats{}) }
