// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	k8smetrics "k8s.io/component-base/metrics"
	upstream "k8s.io/endpointslice/metrics"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
)

var exponential2 = prometheus.ExponentialBuckets(2, 2, 15)

// touchSeries creates one series of every vector, with label values
// upstream uses, so that a gather lists every family.
func touchSeries() {
	metricChanges.WithLabelValues("create")
	metricSyncs.WithLabelValues("success")
	metricSlicesChanged.WithLabelValues("Disabled", "")
	metricServicesByTrafficDistribution.WithLabelValues("PreferClose")
}

// TestMetricsAreKubeControllerManagers holds every series of
// kube-controller-manager's EndpointSlice controller to its name, type,
// help and labels, on controller-runtime's registry that the manager
// serves.
func TestMetricsAreKubeControllerManagers(t *testing.T) {
	registerMetrics()
	touchSeries()
	defer metricServicesByTrafficDistribution.DeleteLabelValues("PreferClose")
	tests := map[string]metricstest.Shape{
		"endpoint_slice_controller_endpoints_added_per_sync": {Type: "HISTOGRAM",
			Help: "[BETA] Number of endpoints added on each Service sync", Buckets: exponential2},
		"endpoint_slice_controller_endpoints_removed_per_sync": {Type: "HISTOGRAM",
			Help: "[BETA] Number of endpoints removed on each Service sync", Buckets: exponential2},
		"endpoint_slice_controller_endpoints_desired":   {Type: "GAUGE", Help: "[BETA] Number of endpoints desired"},
		"endpoint_slice_controller_num_endpoint_slices": {Type: "GAUGE", Help: "[BETA] Number of EndpointSlices"},
		"endpoint_slice_controller_desired_endpoint_slices": {Type: "GAUGE",
			Help: "[BETA] Number of EndpointSlices that would exist with perfect endpoint allocation"},
		"endpoint_slice_controller_changes": {Type: "COUNTER", Help: "[ALPHA] Number of EndpointSlice changes",
			Labels: []string{"operation"}},
		"endpoint_slice_controller_endpointslices_changed_per_sync": {Type: "HISTOGRAM",
			Help: "[ALPHA] Number of EndpointSlices changed on each Service sync", Labels: []string{"topology", "traffic_distribution"},
			Buckets: prometheus.DefBuckets},
		"endpoint_slice_controller_syncs": {Type: "COUNTER", Help: "[ALPHA] Number of EndpointSlice syncs",
			Labels: []string{"result"}},
		"endpoint_slice_controller_services_count_by_traffic_distribution": {Type: "GAUGE",
			Help: "[BETA] Number of Services using some specific trafficDistribution", Labels: []string{"traffic_distribution"}},
		"svcnet_endpointslice_change_to_write_seconds": {Type: "HISTOGRAM",
			Help:    "Time from observing a Pod or Service change to the EndpointSlice write that reflects it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)},
	}
	metricstest.ExpectShapes(t, ctrlmetrics.Registry, tests)
}

// TestMetricsMatchUpstreamPackage compares the series with the ones
// k8s.io/endpointslice/metrics (what kube-controller-manager links)
// defines, so that a change upstream shows here when the module is bumped.
func TestMetricsMatchUpstreamPackage(t *testing.T) {
	registerMetrics()
	touchSeries()
	defer metricServicesByTrafficDistribution.DeleteLabelValues("PreferClose")
	reg := k8smetrics.NewKubeRegistry()
	reg.MustRegister(upstream.EndpointsAddedPerSync, upstream.EndpointsRemovedPerSync, upstream.EndpointsDesired,
		upstream.NumEndpointSlices, upstream.DesiredEndpointSlices, upstream.EndpointSliceChanges,
		upstream.EndpointSlicesChangedPerSync, upstream.EndpointSliceSyncs, upstream.ServicesCountByTrafficDistribution)
	upstream.EndpointsAddedPerSync.WithLabelValues()
	upstream.EndpointsRemovedPerSync.WithLabelValues()
	upstream.EndpointsDesired.WithLabelValues()
	upstream.NumEndpointSlices.WithLabelValues()
	upstream.DesiredEndpointSlices.WithLabelValues()
	upstream.EndpointSliceChanges.WithLabelValues("create")
	upstream.EndpointSlicesChangedPerSync.WithLabelValues("Disabled", "")
	upstream.EndpointSliceSyncs.WithLabelValues("success")
	upstream.ServicesCountByTrafficDistribution.WithLabelValues("PreferClose")
	want, err := metricstest.Shapes(reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 9 {
		t.Fatalf("upstream defines %d series, want the 9 this test knows: add the new ones to svcnet", len(want))
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	got, err := metricstest.Shapes(ctrlmetrics.Registry, names...)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series differ from kube-controller-manager's (-want +got):\n%s", diff)
	}
}

// TestStatsCache checks the gauges against upstream's metrics.Cache
// arithmetic: sums over Services, replaced on every sync, dropped with the
// Service, and the trafficDistribution counts.
func TestStatsCache(t *testing.T) {
	registerMetrics()
	c := newStatsCache()
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	gauges := func() []float64 {
		td, _ := metricstest.Value(ctrlmetrics.Registry, "endpoint_slice_controller_services_count_by_traffic_distribution",
			map[string]string{"traffic_distribution": "PreferClose"})
		return []float64{testutil.ToFloat64(metricEndpointsDesired), testutil.ToFloat64(metricSlices), testutil.ToFloat64(metricDesiredSlices), td}
	}
	base := gauges()
	c.set(a, serviceStats{endpoints: 250, slices: 4, desiredSlices: 3, trafficDistribution: "PreferClose"})
	c.set(b, serviceStats{endpoints: 0, slices: 1, desiredSlices: 1})
	if diff := cmp.Diff([]float64{base[0] + 250, base[1] + 5, base[2] + 4, base[3] + 1}, gauges()); diff != "" {
		t.Errorf("after two Services (-want +got):\n%s", diff)
	}
	c.set(a, serviceStats{endpoints: 10, slices: 1, desiredSlices: 1})
	if diff := cmp.Diff([]float64{base[0] + 10, base[1] + 2, base[2] + 2, base[3]}, gauges()); diff != "" {
		t.Errorf("after a's resync (-want +got):\n%s", diff)
	}
	c.forget(a)
	c.forget(b)
	if diff := cmp.Diff(base, gauges()); diff != "" {
		t.Errorf("after both are gone (-want +got):\n%s", diff)
	}
}

func TestDesiredSlicesOf(t *testing.T) {
	tests := map[string]struct {
		desired desiredEndpoints
		want    int
	}{
		"no endpoints: the placeholder": {desired: desiredEndpoints{}, want: 1},
		"one endpoint":                  {desired: desiredOf(1), want: 1},
		"exactly full":                  {desired: desiredOf(1, 2, 3), want: 1},
		"one over":                      {desired: desiredOf(1, 2, 3, 4), want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := desiredSlicesOf(tc.desired, 3); got != tc.want {
				t.Errorf("desiredSlicesOf = %d, want %d", got, tc.want)
			}
		})
	}
}
