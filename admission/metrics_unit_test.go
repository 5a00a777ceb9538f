// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/portrange"
)

// shape is what dashboards and alerts rely on of a metric family.
type shape struct {
	Type    string
	Labels  []string
	Buckets []float64
}

// TestAllocatorMetricsAreKubeAPIServers holds the counters and the
// histogram svcnet shares with kube-apiserver (ipallocator and
// portallocator metrics.go, v1.37) to their type, label names and buckets
// on the registry the manager serves.
func TestAllocatorMetricsAreKubeAPIServers(t *testing.T) {
	clusterIPAllocations.WithLabelValues("10.0.0.0/24", scopeDynamic)
	clusterIPAllocationErrors.WithLabelValues("10.0.0.0/24", scopeDynamic)
	clusterIPAllocationDuration.WithLabelValues("10.0.0.0/24")
	nodePortAllocations.WithLabelValues(scopeDynamic)
	nodePortAllocationErrors.WithLabelValues(scopeDynamic)
	t.Cleanup(func() {
		clusterIPAllocations.DeleteLabelValues("10.0.0.0/24", scopeDynamic)
		clusterIPAllocationErrors.DeleteLabelValues("10.0.0.0/24", scopeDynamic)
		clusterIPAllocationDuration.DeleteLabelValues("10.0.0.0/24")
	})
	want := map[string]shape{
		"kube_apiserver_clusterip_allocator_allocation_total":            {Type: "COUNTER", Labels: []string{"cidr", "scope"}},
		"kube_apiserver_clusterip_allocator_allocation_errors_total":     {Type: "COUNTER", Labels: []string{"cidr", "scope"}},
		"kube_apiserver_clusterip_allocator_allocation_duration_seconds": {Type: "HISTOGRAM", Labels: []string{"cidr"}, Buckets: prometheus.DefBuckets},
		"kube_apiserver_nodeport_allocator_allocation_total":             {Type: "COUNTER", Labels: []string{"scope"}},
		"kube_apiserver_nodeport_allocator_allocation_errors_total":      {Type: "COUNTER", Labels: []string{"scope"}},
	}
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]shape{}
	for _, f := range families {
		if _, ok := want[f.GetName()]; !ok {
			continue
		}
		if !strings.HasPrefix(f.GetHelp(), "[ALPHA] ") {
			t.Errorf("%s: help %q lacks kube-apiserver's stability prefix", f.GetName(), f.GetHelp())
		}
		s := shape{Type: f.GetType().String()}
		m := f.GetMetric()[0]
		for _, l := range m.GetLabel() {
			s.Labels = append(s.Labels, l.GetName())
		}
		slices.Sort(s.Labels)
		for _, b := range m.GetHistogram().GetBucket() {
			s.Buckets = append(s.Buckets, b.GetUpperBound())
		}
		got[f.GetName()] = s
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series differ from kube-apiserver's (-want +got):\n%s", diff)
	}
}

// A full range is a dynamic error in both svcnet's and kube-apiserver's
// series; a dry run counts in svcnet's only, as kube-apiserver's dry-run
// allocator records nothing.
func TestNodePortMetricsWhenTheRangeIsFull(t *testing.T) {
	alloc, err := portrange.New(portrange.Options{Range: portrange.Range{First: 30000, Last: 30000}})
	if err != nil {
		t.Fatal(err)
	}
	n := &nodePorts{alloc: alloc}
	svc := func(name string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}
	}
	read := func() []float64 {
		return []float64{
			testutil.ToFloat64(nodePortAllocations.WithLabelValues(scopeDynamic)),
			testutil.ToFloat64(nodePortAllocationErrors.WithLabelValues(scopeDynamic)),
			testutil.ToFloat64(allocations.WithLabelValues("nodeport", scopeDynamic)),
			testutil.ToFloat64(allocationErrors.WithLabelValues("nodeport", scopeDynamic)),
		}
	}
	ctx := context.Background()
	tests := []struct {
		name   string
		dryRun bool
		full   bool
		want   []float64 // changes: upstream allocations, errors; svcnet's allocations, errors
	}{
		{name: "dry run of the first", dryRun: true, want: []float64{0, 0, 1, 0}},
		{name: "first", want: []float64{1, 0, 1, 0}},
		{name: "second", full: true, want: []float64{0, 1, 0, 1}},
		{name: "dry run of the second", dryRun: true, full: true, want: []float64{0, 0, 0, 1}},
	}
	for _, tc := range tests {
		before := read()
		_, _, err := n.assign(ctx, svc(tc.name), nil, tc.dryRun)
		var uerr userError
		if full := errors.As(err, &uerr); full != tc.full || (err != nil && !full) {
			t.Fatalf("%s: assign: %v, want full=%v", tc.name, err, tc.full)
		}
		after := read()
		got := make([]float64, len(after))
		for i := range after {
			got[i] = after[i] - before[i]
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: changes (-want +got):\n%s", tc.name, diff)
		}
	}
}
