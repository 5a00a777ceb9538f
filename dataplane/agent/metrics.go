// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The metrics correspond to kube-proxy's kubeproxy_sync_proxy_rules_*.
var (
	metricSyncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "svcnet_agent_sync_duration_seconds",
		Help:    "Time to compute and apply the rules, by kind (full, partial).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"kind"})
	metricRulesWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_agent_rules_written_total",
		Help: "Rules written by iptables-restore.",
	})
	metricRestoreFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_agent_restore_failures_total",
		Help: "Failed transactions of a backend (iptables-restore, nft or netlink), each retried with a full sync.",
	})
	metricSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_agent_sync_failures_total",
		Help: "Failed syncs, by the step that failed (node, render, node-addresses, list, apply); each is retried with backoff, and /healthz fails once a change has waited twice --sync-period.",
	}, []string{"reason"})
	metricUnseenChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_agent_unseen_changes_total",
		Help: "Services the periodic recheck found changed in the cache since their last render without an event having said so; each is re-rendered.",
	})
	// The conntrack reconciler's figures carry kube-proxy's names, labels
	// and buckets, so that its dashboards and alerts read them.
	metricConntrackReconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
		Help:    "Time one pass of the UDP conntrack cleanup took, in seconds, by IP family.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"ip_family"})
	metricConntrackDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
		Help: "UDP conntrack entries the cleanup deleted because no serving endpoint answers them any more, by IP family.",
	}, []string{"ip_family"})
	metricFlushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_agent_rules_flushed_total",
		Help: "Times the canary found a backend's rules removed by another program (iptables -F, a firewalld reload), each followed at once by a full sync, by IP family.",
	}, []string{"ip_family"})
	metricProgrammingLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_agent_network_programming_duration_seconds",
		Help:    "Time from an EndpointSlice's last-change-trigger-time to the rules that reflect it being applied.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricSyncDuration, metricRulesWritten, metricRestoreFailures, metricSyncFailures, metricUnseenChanges, metricProgrammingLatency,
			metricConntrackReconcileDuration, metricConntrackDeleted, metricFlushes)
	})
}

// proxyModeHandler answers /proxyMode on the metrics address with the
// dataplane mode as plain text, as kube-proxy's metrics server does:
// tools and upstream's e2e ask it which mode a node runs.
func proxyModeHandler(mode string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, mode)
	})
}

// metricsHandler serves what kube-proxy's metrics address serves and the
// agent has: /metrics (controller-runtime's registry, which holds the
// agent's, client-go's and the Go runtime's series), /proxyMode and
// /healthz ("ok" while the process serves, as kube-proxy's).
func metricsHandler(mode string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.Handle("/proxyMode", proxyModeHandler(mode))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, "ok")
	})
	return mux
}
