// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/svcnet-io/svcnet/dataplane/announce"
)

// RuleFile is a Prometheus rule file: what `promtool check rules` reads
// and what a PrometheusRule's spec holds.
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is an alerting rule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Severities, as kubernetes-mixin labels its alerts.
const (
	severityWarning  = "warning"
	severityCritical = "critical"
)

// Params are the thresholds of the rules.
type Params struct {
	// Full is the share of a range or pool in use above which it is
	// nearly full.
	Full float64
	// FailoverBudget is the longest an L2 address may go unanswered when
	// it moves; it must be a bucket bound of
	// svcnet_announce_failover_seconds (announce.FailoverBuckets).
	FailoverBudget time.Duration
	// StaleAfter is how long a queued change may wait for a successful
	// sync of a node's rules.
	StaleAfter time.Duration
}

// DefaultParams are the shipped thresholds. A lost peer's addresses move
// after --announce-dead-after plus up to one heartbeat interval (0.6 s
// with the defaults), so 1 s leaves room for scheduling on a busy node;
// kube-proxy's own health check fails after two sync periods without a
// sync of queued changes, and 60 s is twice the agent's
// --iptables-min-sync-period ceiling that people set.
func DefaultParams() Params {
	return Params{Full: 0.9, FailoverBudget: time.Second, StaleAfter: time.Minute}
}

// Rules are svcnet's alerting rules for p.
func Rules(p Params) (RuleFile, error) {
	budget := p.FailoverBudget.Seconds()
	if !slices.Contains(announce.FailoverBuckets, budget) {
		return RuleFile{}, fmt.Errorf("failover budget %s is not a bucket bound of svcnet_announce_failover_seconds %v", p.FailoverBudget, announce.FailoverBuckets)
	}
	full := strconv.FormatFloat(p.Full, 'f', -1, 64)
	percent := strconv.FormatFloat(p.Full*100, 'f', -1, 64)
	stale := strconv.FormatFloat(p.StaleAfter.Seconds(), 'f', -1, 64)
	return RuleFile{Groups: []RuleGroup{
		{Name: "svcnet-allocation", Rules: allocationRules(full, percent)},
		{Name: "svcnet-dataplane", Rules: dataplaneRules(stale)},
		{Name: "svcnet-loadbalancer", Rules: announceRules(budget)},
	}}, nil
}

// allocationRules warn before a ClusterIP range, the nodePort range or a
// LoadBalancerIPPool runs out: the next Service of that kind would be
// refused (ClusterIP, nodePort) or stay pending (LoadBalancer).
func allocationRules(full, percent string) []Rule {
	return []Rule{
		{
			Alert:  "SvcnetServiceCIDRNearlyFull",
			Expr:   "svcnet_clusterip_cidr_allocated / (svcnet_clusterip_cidr_allocated + svcnet_clusterip_cidr_available) > " + full,
			For:    "5m",
			Labels: map[string]string{"severity": severityWarning},
			Annotations: map[string]string{
				"summary":     "A ServiceCIDR is nearly full.",
				"description": "ServiceCIDR {{ $labels.servicecidr }} has {{ $value | humanizePercentage }} of its ClusterIPs allocated (above " + percent + "%); add a ServiceCIDR before Services are refused.",
			},
		},
		{
			Alert:  "SvcnetNodePortRangeNearlyFull",
			Expr:   "svcnet_nodeport_allocated / (svcnet_nodeport_allocated + svcnet_nodeport_available) > " + full,
			For:    "5m",
			Labels: map[string]string{"severity": severityWarning},
			Annotations: map[string]string{
				"summary":     "The nodePort range is nearly full.",
				"description": "nodePort range {{ $labels.range }} has {{ $value | humanizePercentage }} of its ports held (above " + percent + "%); NodePort and LoadBalancer Services will be refused when it is full.",
			},
		},
		{
			Alert:  "SvcnetLoadBalancerPoolNearlyFull",
			Expr:   "svcnet_loadbalancer_pool_allocated / svcnet_loadbalancer_pool_capacity > " + full,
			For:    "5m",
			Labels: map[string]string{"severity": severityWarning},
			Annotations: map[string]string{
				"summary":     "A LoadBalancerIPPool is nearly full.",
				"description": "LoadBalancerIPPool {{ $labels.pool }} has {{ $value | humanizePercentage }} of its addresses held (above " + percent + "%); new LoadBalancer Services will stay pending when it is full.",
			},
		},
	}
}

// dataplaneRules catch a node whose rules lag the cluster: a change was
// queued and no sync has succeeded since, for longer than stale seconds
// (the agent retries; the rules it had stay in place, so traffic to the
// changed Services goes by the old picture).
func dataplaneRules(stale string) []Rule {
	return []Rule{{
		Alert: "SvcnetNodeRulesStale",
		Expr: "(kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds > kubeproxy_sync_proxy_rules_last_timestamp_seconds)" +
			" and (time() - kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds > " + stale + ")",
		For:    "1m",
		Labels: map[string]string{"severity": severityWarning},
		Annotations: map[string]string{
			"summary":     "A node's Service rules are stale.",
			"description": "The agent on {{ $labels.instance }} ({{ $labels.ip_family }}) has not applied a change queued more than " + stale + " s ago: its Service rules lag the cluster. Its log and svcnet_agent_sync_failures_total say why.",
		},
	}}
}

// leMatcher matches the histogram bucket of bound b as Prometheus 2
// ("1") and Prometheus 3 ("1.0": it normalizes le on ingestion) store it.
func leMatcher(b float64) string {
	s := strconv.FormatFloat(b, 'f', -1, 64)
	if b == math.Trunc(b) {
		return `le=~"` + s + `(\\.0)?"`
	}
	return `le="` + s + `"`
}

// announceRules catch a LoadBalancer address no node answers for, and an
// L2 move that left one unanswered for longer than budgetSeconds.
func announceRules(budgetSeconds float64) []Rule {
	budget := strconv.FormatFloat(budgetSeconds, 'f', -1, 64)
	return []Rule{
		{
			Alert:  "SvcnetLoadBalancerUnannounced",
			Expr:   "svcnet_loadbalancer_announced == 0",
			For:    "2m",
			Labels: map[string]string{"severity": severityCritical},
			Annotations: map[string]string{
				"summary":     "A LoadBalancer address is announced by no node.",
				"description": "Service {{ $labels.namespace }}/{{ $labels.service }} has a LoadBalancer address that no node may announce (condition svcnet.io/LoadBalancerAnnounced is False): no node the LoadBalancerAnnouncement selects is a candidate. Clients outside the cluster cannot reach it.",
			},
		},
		{
			Alert: "SvcnetLoadBalancerFailoverSlow",
			Expr: "sum by (instance, address) (increase(svcnet_announce_failover_seconds_count[15m]))" +
				" - sum by (instance, address) (increase(svcnet_announce_failover_seconds_bucket{" + leMatcher(budgetSeconds) + "}[15m])) > 0",
			Labels: map[string]string{"severity": severityWarning},
			Annotations: map[string]string{
				"summary":     "A LoadBalancer address moved slower than its budget.",
				"description": "{{ $labels.instance }} took over {{ $labels.address }} in the last 15 minutes after it had gone unanswered for more than " + budget + " s. The Service's Announced Event says from which node and why.",
			},
		},
	}
}

// YAML renders a rule file.
func (f RuleFile) YAML() ([]byte, error) {
	return yaml.Marshal(f)
}
