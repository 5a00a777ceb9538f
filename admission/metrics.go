// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "svcnet_admission_duration_seconds",
		Help:    "Time svcnet's Service webhook took to answer, by outcome (patched, unchanged, denied, passed: not leader or not in sync).",
		Buckets: []float64{0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1, 0.5},
	}, []string{"outcome"})
	allocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_admission_allocations_total",
		Help: "Values handed out at admission, by kind (clusterip, nodeport) and scope (dynamic: chosen by svcnet; static: asked for by the user).",
	}, []string{"kind", "scope"})
	allocationErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_admission_allocation_errors_total",
		Help: "Requests svcnet could not serve, by kind (clusterip, nodeport) and scope (dynamic, static).",
	}, []string{"kind", "scope"})
)

func init() {
	metrics.Registry.MustRegister(admissionDuration, allocations, allocationErrors)
}
