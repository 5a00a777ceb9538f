// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svcnet-io/svcnet/internal/monitoring"
)

// TestChartMonitoring: the monitoring values render the operator's
// objects with what internal/monitoring ships, and let Prometheus reach
// the agents as kube-proxy.
func TestChartMonitoring(t *testing.T) {
	helm := helmBinary(t)
	objs := helmTemplate(t, helm,
		"monitoring.serviceMonitor.enabled=true", "monitoring.podMonitor.enabled=true",
		"monitoring.prometheusRule.enabled=true", "monitoring.dashboards.enabled=true",
		"monitoring.labels.release=kube-prometheus-stack", "monitoring.dashboards.namespace=grafana")
	get := func(key string) *unstructured.Unstructured {
		t.Helper()
		u, ok := objs[key]
		if !ok {
			t.Fatalf("no %s", key)
		}
		return u
	}
	files, err := monitoring.Files()
	if err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"ServiceMonitor/svcnet-manager", "PodMonitor/svcnet-agent", "PrometheusRule/svcnet"} {
		if got := get(key).GetLabels()["release"]; got != "kube-prometheus-stack" {
			t.Errorf("%s: label release=%q, want the value of monitoring.labels", key, got)
		}
	}

	t.Run("the agents are scraped as kube-proxy", func(t *testing.T) {
		ds := get("DaemonSet/svcnet-agent")
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		c := cs[0].(map[string]any)
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		if !slices.Contains(args, "--metrics-bind-address=0.0.0.0:10249") {
			t.Errorf("agent args %q: the metrics address is not reachable from Prometheus", args)
		}
		ports, _, _ := unstructured.NestedSlice(c, "ports")
		if diff := cmp.Diff([]any{map[string]any{"name": "metrics", "containerPort": float64(10249)}}, ports); diff != "" {
			t.Errorf("agent ports (-want +got):\n%s", diff)
		}
		eps, _, _ := unstructured.NestedSlice(get("PodMonitor/svcnet-agent").Object, "spec", "podMetricsEndpoints")
		rl, _, _ := unstructured.NestedSlice(eps[0].(map[string]any), "relabelings")
		want := []any{
			map[string]any{"targetLabel": "job", "replacement": "kube-proxy"},
			map[string]any{"sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "instance"},
		}
		if diff := cmp.Diff(want, rl); diff != "" {
			t.Errorf("PodMonitor relabelings (-want +got):\n%s", diff)
		}
	})

	t.Run("the PrometheusRule holds the rule file", func(t *testing.T) {
		rules, err := monitoring.Rules(monitoring.DefaultParams())
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		b, _ := json.Marshal(rules)
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		got, _, _ := unstructured.NestedMap(get("PrometheusRule/svcnet").Object, "spec")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("PrometheusRule spec (-rule file +rendered):\n%s", diff)
		}
	})

	t.Run("a ConfigMap per dashboard", func(t *testing.T) {
		dashboards, err := monitoring.Dashboards()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dashboards {
			name := d.File[:len(d.File)-len(".json")] + "-dashboard"
			cm := get("ConfigMap/" + name)
			if cm.GetNamespace() != "grafana" || cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("%s: namespace %q, labels %v", name, cm.GetNamespace(), cm.GetLabels())
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			if diff := cmp.Diff(string(files["dashboards/"+d.File]), data[d.File]+"\n"); diff != "" {
				t.Errorf("%s (-shipped +rendered):\n%s", name, diff)
			}
		}
	})
}
