// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/ipam"
)

// Scopes of an allocation, as kube-apiserver labels them.
const (
	scopeDynamic = "dynamic" // svcnet chose the value
	scopeStatic  = "static"  // the user asked for it
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

// kube-apiserver's allocator series (pkg/registry/core/service/ipallocator
// and portallocator, v1.37): same names, labels and buckets, counted at the
// same points, so that dashboards and alerts written for kube-apiserver
// read svcnet's manager for the values svcnet chooses. (kube-apiserver,
// which only commits them, counts every one as static.) As there, dry runs
// count nothing; svcnet's own series above count them. The gauges
// (allocated_ips, available_ips, allocated_ports, available_ports) are the
// audits' (controllers/ipaddress, controllers/nodeport).
var (
	clusterIPAllocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kube_apiserver", Subsystem: "clusterip_allocator", Name: "allocation_total",
		Help: "[ALPHA] ClusterIPs allocated to Services, by ServiceCIDR prefix (cidr) and scope (dynamic, static)",
	}, []string{"cidr", "scope"})
	clusterIPAllocationErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kube_apiserver", Subsystem: "clusterip_allocator", Name: "allocation_errors_total",
		Help: "[ALPHA] Failed attempts to allocate a ClusterIP, by ServiceCIDR prefix (cidr) and scope (dynamic, static)",
	}, []string{"cidr", "scope"})
	clusterIPAllocationDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "kube_apiserver", Subsystem: "clusterip_allocator", Name: "allocation_duration_seconds",
		Help:    "[ALPHA] Seconds taken to allocate one ClusterIP, by ServiceCIDR prefix (cidr)",
		Buckets: prometheus.DefBuckets,
	}, []string{"cidr"})
	nodePortAllocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kube_apiserver", Subsystem: "nodeport_allocator", Name: "allocation_total",
		Help: "[ALPHA] NodePorts allocated to Services, by scope (dynamic, static)",
	}, []string{"scope"})
	nodePortAllocationErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "kube_apiserver", Subsystem: "nodeport_allocator", Name: "allocation_errors_total",
		Help: "[ALPHA] Failed attempts to allocate a NodePort, by scope (dynamic, static)",
	}, []string{"scope"})
)

func init() {
	metrics.Registry.MustRegister(admissionDuration, allocations, allocationErrors,
		clusterIPAllocations, clusterIPAllocationErrors, clusterIPAllocationDuration,
		nodePortAllocations, nodePortAllocationErrors)
}

// countClusterIP records an address handed out from prefix (invalid: in
// no ServiceCIDR, no upstream series) in took.
func countClusterIP(prefix netip.Prefix, req ipam.Request, scope string, took time.Duration) {
	allocations.WithLabelValues("clusterip", scope).Inc()
	if req.DryRun || !prefix.IsValid() {
		return
	}
	cidr := prefix.String()
	clusterIPAllocations.WithLabelValues(cidr, scope).Inc()
	clusterIPAllocationDuration.WithLabelValues(cidr).Observe(took.Seconds())
}

// countClusterIPError records a request svcnet could not serve: a static
// one on the prefix that holds the address asked for (kube-apiserver has
// no allocator, hence no series, for an address outside every ServiceCIDR),
// a dynamic one on every prefix it could have drawn from, as each of
// kube-apiserver's per-prefix allocators counts its own failure.
func (c *clusterIPs) countClusterIPError(addr netip.Addr, req ipam.Request, scope string) {
	allocationErrors.WithLabelValues("clusterip", scope).Inc()
	if req.DryRun {
		return
	}
	if scope == scopeStatic {
		if p, ok := c.alloc.PrefixOf(addr); ok {
			clusterIPAllocationErrors.WithLabelValues(p.String(), scope).Inc()
		}
		return
	}
	for _, p := range c.alloc.CandidatePrefixes(req) {
		clusterIPAllocationErrors.WithLabelValues(p.String(), scope).Inc()
	}
}

func countNodePort(scope string, dryRun bool) {
	allocations.WithLabelValues("nodeport", scope).Inc()
	if !dryRun {
		nodePortAllocations.WithLabelValues(scope).Inc()
	}
}

func countNodePortError(scope string, dryRun bool) {
	allocationErrors.WithLabelValues("nodeport", scope).Inc()
	if !dryRun {
		nodePortAllocationErrors.WithLabelValues(scope).Inc()
	}
}
