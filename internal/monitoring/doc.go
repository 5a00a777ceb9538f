// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package monitoring holds, as code, what svcnet ships for Prometheus and
// Grafana: its alerting rules (Rules, a Prometheus rule file that the
// chart's PrometheusRule carries) and its dashboards (Dashboards, built
// with grafana-foundation-sdk). Files renders both into the chart's
// files/monitoring folder; a test keeps the committed files in sync
// (`make monitoring` rewrites them) and runs promtool's unit tests of the
// rules (testdata/rules_test.yaml).
//
// The series are those svcnet exports: kube-proxy's kubeproxy_* on the
// agents, kube-controller-manager's endpoint_slice_* and kube-apiserver's
// allocator series on the manager, and svcnet_* where only svcnet has the
// number. Agents are scraped as job "kube-proxy" (the chart's PodMonitor
// relabels them so), so kube-proxy's own dashboards and alerts keep
// working; svcnet's rules and dashboards select by metric name only.
package monitoring
