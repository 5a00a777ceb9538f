// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane"
)

// kube-proxy v1.37's own series (k8s.io/kubernetes pkg/proxy/metrics),
// under its names, label names and values, types and buckets, observed
// where kube-proxy observes them, so that dashboards, alerts and the
// network programming latency SLI written for kube-proxy read the agent
// unchanged. kube-proxy runs one proxier per IP family; the agent one sync
// for every family, whose figures go to each family's series as that
// family's proxier would report them. docs/operations.md maps every
// kube-proxy series to the agent's.
var (
	// syncBuckets are kube-proxy's buckets for the sync durations.
	syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

	metricSyncRulesDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubeproxy_sync_proxy_rules_duration_seconds",
		Help:    "Time one sync of an IP family's rules took, full or partial, in seconds: the render it shares with the other family plus its own transaction.",
		Buckets: syncBuckets,
	}, []string{"ip_family"})
	metricSyncFullRulesDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubeproxy_sync_full_proxy_rules_duration_seconds",
		Help:    "Time one full sync (every chain or object rewritten) of an IP family's rules took, in seconds.",
		Buckets: syncBuckets,
	}, []string{"ip_family"})
	metricSyncPartialRulesDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kubeproxy_sync_partial_proxy_rules_duration_seconds",
		Help: "Time one partial sync of an IP family's rules took, in seconds. " +
			"Unlike kube-proxy's partial sync, which recomputes every Service and writes the chains that changed, the agent's re-renders only the Services that changed.",
		Buckets: syncBuckets,
	}, []string{"ip_family"})
	metricSyncLastTimestamp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
		Help: "When an IP family's rules were last applied successfully, in seconds since the epoch.",
	}, []string{"ip_family"})
	metricSyncLastQueuedTimestamp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "When a change was last queued for a sync of an IP family's rules, in seconds since the epoch; far ahead of the last sync's timestamp means syncs are stuck.",
	}, []string{"ip_family"})
	metricNetworkProgrammingDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kubeproxy_network_programming_duration_seconds",
		Help: "Time from an EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time to the rules of its IP family that reflect it being applied, in seconds (the SIG Scalability network programming latency SLI).",
		Buckets: mergeBuckets(
			prometheus.LinearBuckets(0.25, 0.25, 2),
			prometheus.LinearBuckets(1, 1, 59),
			prometheus.LinearBuckets(60, 5, 12),
			prometheus.LinearBuckets(120, 30, 7),
		),
	}, []string{"ip_family"})
	metricEndpointChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
		Help: "EndpointSlice changes seen since the last sync started.",
	})
	metricEndpointChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_endpoint_changes_total",
		Help: "EndpointSlice changes seen (of the address types the node programs).",
	})
	metricServiceChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_service_changes_pending",
		Help: "Services changed since the last sync started.",
	})
	metricServiceChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_service_changes_total",
		Help: "Service changes seen, each counted once per IP family the node programs, as by kube-proxy's proxier of each family.",
	})
	metricNoLocalEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
		Help: "Service ports with endpoints, a Local traffic policy and no local endpoint (their traffic of that policy is dropped), by policy (internal, external) and IP family, as of the last successful sync.",
	}, []string{"traffic_policy", "ip_family"})
	metricIPTablesRestoreFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
		Help: "iptables-restore runs that failed, by IP family; each is retried with a full sync.",
	}, []string{"ip_family"})
	metricIPTablesPartialRestoreFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
		Help: "Partial syncs of the iptables rules that failed, by IP family; each is retried as a full sync.",
	}, []string{"ip_family"})
	metricIPTablesRules = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_iptables_total",
		Help: "iptables rules the agent owns, by table (filter, nat) and IP family.",
	}, []string{"table", "ip_family"})
	metricIPTablesRulesLast = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubeproxy_sync_proxy_rules_iptables_last",
		Help: "iptables rules the last sync wrote, by table (filter, nat) and IP family; a partial sync writes only the chains that changed, in both tables.",
	}, []string{"table", "ip_family"})
	metricNFTablesSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
		Help: "nftables transactions of a sync that failed, by IP family; each is retried with a full sync.",
	}, []string{"ip_family"})
	metricNFTablesCleanupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
		Help: "Always 0: the agent deletes stale chains in the sync's own transaction, whose failures kubeproxy_sync_proxy_rules_nftables_sync_failures_total counts.",
	}, []string{"ip_family"})
	metricHealthz = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_proxy_healthz_total",
		Help: "Answers of the health server's /healthz, by HTTP status code.",
	}, []string{"code"})
	metricLivez = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_proxy_livez_total",
		Help: "Answers of the health server's /livez, by HTTP status code.",
	}, []string{"code"})
	// The conntrack reconciler's figures (conntrack.go).
	metricConntrackReconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
		Help:    "Time one pass of the UDP conntrack cleanup took, in seconds, by IP family.",
		Buckets: syncBuckets,
	}, []string{"ip_family"})
	metricConntrackDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
		Help: "UDP conntrack entries the cleanup deleted because no serving endpoint answers them any more, by IP family.",
	}, []string{"ip_family"})
)

// mergeBuckets joins bucket lists that are each sorted and follow one
// another.
func mergeBuckets(lists ...[]float64) []float64 {
	var out []float64
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// kubeProxyCollectors are kube-proxy's series of a mode, as kube-proxy
// registers them: those of every mode, then the mode's own.
func kubeProxyCollectors(mode string) []prometheus.Collector {
	out := []prometheus.Collector{
		metricSyncRulesDuration, metricSyncLastQueuedTimestamp, metricSyncLastTimestamp,
		metricEndpointChangesPending, metricEndpointChangesTotal, metricServiceChangesPending, metricServiceChangesTotal,
		metricHealthz, metricLivez, metricNetworkProgrammingDuration, metricNoLocalEndpoints,
		metricSyncFullRulesDuration, metricSyncPartialRulesDuration,
		metricConntrackReconcileDuration, metricConntrackDeleted,
	}
	switch mode {
	case ModeIPTables:
		out = append(out, metricIPTablesRestoreFailures, metricIPTablesPartialRestoreFailures, metricIPTablesRules, metricIPTablesRulesLast)
	case ModeNFTables:
		out = append(out, metricNFTablesSyncFailures, metricNFTablesCleanupFailures)
	}
	return out
}

// initFailureCounters makes the failure counters of the node's families
// start at 0, so that a rate over the first failure sees it.
func initFailureCounters(mode string, families []corev1.IPFamily) {
	for _, f := range families {
		switch mode {
		case ModeIPTables:
			metricIPTablesRestoreFailures.WithLabelValues(string(f))
			metricIPTablesPartialRestoreFailures.WithLabelValues(string(f))
		case ModeNFTables:
			metricNFTablesSyncFailures.WithLabelValues(string(f))
			metricNFTablesCleanupFailures.WithLabelValues(string(f))
		}
	}
}

// unixSeconds is a time as the timestamp gauges hold it.
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// observeFamilySync records one backend's part of a sync as its IP
// family's kube-proxy proxier records a sync: took is the shared render
// plus the backend's transaction; the failure counters follow
// kube-proxy's (a partial iptables sync that fails for any reason, a
// refused transaction), not the reading of the live rules before a full
// sync (svcnet_agent_sync_failures_total{reason="list"}).
func observeFamilySync(mode string, family corev1.IPFamily, res dataplane.SyncResult, took time.Duration, now time.Time, err error) {
	f := string(family)
	metricSyncRulesDuration.WithLabelValues(f).Observe(took.Seconds())
	if res.Full {
		metricSyncFullRulesDuration.WithLabelValues(f).Observe(took.Seconds())
	} else {
		metricSyncPartialRulesDuration.WithLabelValues(f).Observe(took.Seconds())
	}
	refused := err != nil && !errors.Is(err, dataplane.ErrListRules)
	switch {
	case err == nil:
		metricSyncLastTimestamp.WithLabelValues(f).Set(unixSeconds(now))
		for _, t := range res.Tables {
			metricIPTablesRules.WithLabelValues(t.Table, f).Set(float64(t.Total))
			metricIPTablesRulesLast.WithLabelValues(t.Table, f).Set(float64(t.Written))
		}
	case mode == ModeIPTables:
		if !res.Full {
			metricIPTablesPartialRestoreFailures.WithLabelValues(f).Inc()
		}
		if refused {
			metricIPTablesRestoreFailures.WithLabelValues(f).Inc()
		}
	case mode == ModeNFTables && refused:
		metricNFTablesSyncFailures.WithLabelValues(f).Inc()
	}
}

// noLocalCounts are a Service's (or every Service's) ports of one IP
// family that have endpoints, a Local traffic policy and no local
// endpoint, by policy: kube-proxy's
// kubeproxy_sync_proxy_rules_no_local_endpoints_total.
type noLocalCounts struct {
	internal, external int
}

func (c noLocalCounts) plus(d noLocalCounts, sign int) noLocalCounts {
	return noLocalCounts{internal: c.internal + sign*d.internal, external: c.external + sign*d.external}
}

// setNoLocalEndpoints publishes the totals after a successful sync.
func setNoLocalEndpoints(totals map[corev1.IPFamily]noLocalCounts, families []corev1.IPFamily) {
	for _, f := range families {
		metricNoLocalEndpoints.WithLabelValues("internal", string(f)).Set(float64(totals[f].internal))
		metricNoLocalEndpoints.WithLabelValues("external", string(f)).Set(float64(totals[f].external))
	}
}
