// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/kube-proxy/config/v1alpha1"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// svcnet's own series: what kube-proxy's (kubeproxymetrics.go) do not
// tell.
var (
	metricRulesWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_agent_rules_written_total",
		Help: "Rules written by the backends' transactions (iptables rules, or nftables objects and elements), every family.",
	})
	metricSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_agent_sync_failures_total",
		Help: "Failed syncs, by the step that failed (node, render, node-addresses, list, apply); each is retried with backoff, and /healthz fails once a change has waited twice --sync-period.",
	}, []string{"reason"})
	metricUnseenChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_agent_unseen_changes_total",
		Help: "Services the periodic recheck found changed in the cache since their last render without an event having said so; each is re-rendered.",
	})
	metricFlushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_agent_rules_flushed_total",
		Help: "Times the canary found a backend's rules removed by another program (iptables -F, a firewalld reload), each followed at once by a full sync, by IP family.",
	}, []string{"ip_family"})
)

var registerOnce sync.Once

// registerMetrics registers the agent's series of a mode, kube-proxy's
// and svcnet's, and client-go's request latency, which kube-proxy's
// dashboard reads (controller-runtime registers only the request count by
// default), on controller-runtime's registry.
func registerMetrics(mode string) {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricRulesWritten, metricSyncFailures, metricUnseenChanges, metricFlushes)
		ctrlmetrics.Registry.MustRegister(kubeProxyCollectors(mode)...)
		ctrlmetrics.RegisterRESTClientMetrics(ctrlmetrics.MetricRequestLatency)
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
// agent's, client-go's and the Go runtime's series), /proxyMode,
// /configz and /healthz ("ok" while the process serves, as kube-proxy's).
func metricsHandler(cfg Config) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.Handle("/proxyMode", proxyModeHandler(cfg.Mode))
	mux.Handle("/configz", configzHandler(cfg.KubeProxyConfiguration))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, "ok")
	})
	return mux
}

// configzHandler answers /configz as kube-proxy's (k8s.io/component-base
// configz) does: a JSON object holding the configuration in effect under
// its API group's name.
func configzHandler(c *v1alpha1.KubeProxyConfiguration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		body, err := json.Marshal(map[string]*v1alpha1.KubeProxyConfiguration{v1alpha1.GroupName: c})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
}
