package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
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
	metricProgrammingLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svcnet_agent_network_programming_duration_seconds",
		Help:    "Time from an EndpointSlice's last-change-trigger-time to the rules that reflect it being applied.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricSyncDuration, metricRulesWritten, metricRestoreFailures, metricSyncFailures, metricUnseenChanges, metricProgrammingLatency)
	})
}
