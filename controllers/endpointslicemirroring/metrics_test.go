// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
)

// TestMetricsAreKubeControllerManagers holds every series of
// kube-controller-manager's mirroring controller
// (pkg/controller/endpointslicemirroring/metrics/metrics.go, v1.37.1) to
// its name, type, help, labels and buckets, on controller-runtime's
// registry that the manager serves.
func TestMetricsAreKubeControllerManagers(t *testing.T) {
	registerMetrics()
	metricChanges.WithLabelValues("create")
	perSync := prometheus.ExponentialBuckets(2, 2, 15)
	tests := map[string]metricstest.Shape{
		"endpoint_slice_mirroring_controller_endpoints_added_per_sync": {Type: "HISTOGRAM",
			Help: "[ALPHA] Number of endpoints added on each Endpoints sync", Buckets: perSync},
		"endpoint_slice_mirroring_controller_endpoints_updated_per_sync": {Type: "HISTOGRAM",
			Help: "[ALPHA] Number of endpoints updated on each Endpoints sync", Buckets: perSync},
		"endpoint_slice_mirroring_controller_endpoints_removed_per_sync": {Type: "HISTOGRAM",
			Help: "[ALPHA] Number of endpoints removed on each Endpoints sync", Buckets: perSync},
		"endpoint_slice_mirroring_controller_addresses_skipped_per_sync": {Type: "HISTOGRAM",
			Help:    "[ALPHA] Number of addresses skipped on each Endpoints sync due to being invalid or exceeding MaxEndpointsPerSubset",
			Buckets: perSync},
		"endpoint_slice_mirroring_controller_endpoints_sync_duration": {Type: "HISTOGRAM",
			Help: "[ALPHA] Duration of syncEndpoints() in seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)},
		"endpoint_slice_mirroring_controller_endpoints_desired":   {Type: "GAUGE", Help: "[ALPHA] Number of endpoints desired"},
		"endpoint_slice_mirroring_controller_num_endpoint_slices": {Type: "GAUGE", Help: "[ALPHA] Number of EndpointSlices"},
		"endpoint_slice_mirroring_controller_desired_endpoint_slices": {Type: "GAUGE",
			Help: "[ALPHA] Number of EndpointSlices that would exist with perfect endpoint allocation"},
		"endpoint_slice_mirroring_controller_changes": {Type: "COUNTER", Help: "[ALPHA] Number of EndpointSlice changes",
			Labels: []string{"operation"}},
	}
	metricstest.ExpectShapes(t, ctrlmetrics.Registry, tests)
}

func TestMirrorTotals(t *testing.T) {
	ports := []corev1.EndpointPort{{Name: "pg", Port: 5432}}
	eps := func(ready []string, notReady ...string) *corev1.Endpoints {
		sub := corev1.EndpointSubset{Ports: ports}
		for _, ip := range ready {
			sub.Addresses = append(sub.Addresses, corev1.EndpointAddress{IP: ip})
		}
		for _, ip := range notReady {
			sub.NotReadyAddresses = append(sub.NotReadyAddresses, corev1.EndpointAddress{IP: ip})
		}
		return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Subsets: []corev1.EndpointSubset{sub}}
	}
	// existing is what a sync of ep wrote, named name.
	existing := func(ep *corev1.Endpoints, name string) []*discoveryv1.EndpointSlice {
		p := planMirror(newSliceMeta(ep), computeDesiredMirror(ep, 100), nil)
		for _, s := range p.create {
			s.Name = name
		}
		return p.create
	}
	other := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"},
		Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Name: "other", Port: 1}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}}}}
	tests := map[string]struct {
		ep       *corev1.Endpoints
		existing []*discoveryv1.EndpointSlice
		want     totals
	}{
		"first sync adds all":                   {ep: eps([]string{"10.0.0.1", "10.0.0.2"}), want: totals{added: 2}},
		"nothing changed":                       {ep: eps([]string{"10.0.0.1"}), existing: existing(eps([]string{"10.0.0.1"}), "a"), want: totals{}},
		"one added, one removed":                {ep: eps([]string{"10.0.0.1", "10.0.0.3"}), existing: existing(eps([]string{"10.0.0.1", "10.0.0.2"}), "a"), want: totals{added: 1, removed: 1}},
		"one became not ready":                  {ep: eps([]string{"10.0.0.1"}, "10.0.0.2"), existing: existing(eps([]string{"10.0.0.1", "10.0.0.2"}), "a"), want: totals{updated: 1}},
		"no addresses left":                     {ep: eps(nil), existing: existing(eps([]string{"10.0.0.1", "10.0.0.2"}), "a"), want: totals{removed: 2}},
		"ports changed: not counted as removed": {ep: eps([]string{"10.0.0.1"}), existing: existing(other, "a"), want: totals{added: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := mirrorTotals(computeDesiredMirror(tc.ep, 100), tc.existing)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(totals{})); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
		})
	}
}
