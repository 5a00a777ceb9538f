// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
)

// kubeProxySeries are kube-proxy v1.37.1's series of the iptables and
// nftables modes (k8s.io/kubernetes pkg/proxy/metrics/metrics.go,
// RegisterMetrics), less the nfacct and nftables counter collectors,
// which accounting.go exports: name, type, label names, and the modes that
// register them ("" for both).
var kubeProxySeries = []seriesDesc{
	{"kubeproxy_sync_proxy_rules_duration_seconds", "histogram", "ip_family", ""},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram", "ip_family", ""},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram", "ip_family", ""},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge", "ip_family", ""},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge", "ip_family", ""},
	{"kubeproxy_network_programming_duration_seconds", "histogram", "ip_family", ""},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge", "", ""},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter", "", ""},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", "gauge", "", ""},
	{"kubeproxy_sync_proxy_rules_service_changes_total", "counter", "", ""},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge", "traffic_policy,ip_family", ""},
	{"kubeproxy_proxy_healthz_total", "counter", "code", ""},
	{"kubeproxy_proxy_livez_total", "counter", "code", ""},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram", "ip_family", ""},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", "counter", "ip_family", ""},
	{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", "counter", "ip_family", ModeIPTables},
	{"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", "counter", "ip_family", ModeIPTables},
	{"kubeproxy_sync_proxy_rules_iptables_total", "gauge", "table,ip_family", ModeIPTables},
	{"kubeproxy_sync_proxy_rules_iptables_last", "gauge", "table,ip_family", ModeIPTables},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter", "ip_family", ModeNFTables},
	{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter", "ip_family", ModeNFTables},
}

type seriesDesc struct {
	name, typ, labels, mode string
}

var descPattern = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// describe is what the collectors declare: name, type and label names.
func describe(t *testing.T, collectors []prometheus.Collector) []seriesDesc {
	t.Helper()
	var out []seriesDesc
	for _, c := range collectors {
		typ := ""
		switch c.(type) {
		case *prometheus.HistogramVec, prometheus.Histogram:
			typ = "histogram"
		case *prometheus.GaugeVec, prometheus.Gauge: // a Gauge is a Counter too
			typ = "gauge"
		case *prometheus.CounterVec, prometheus.Counter:
			typ = "counter"
		}
		ch := make(chan *prometheus.Desc, 1)
		c.Describe(ch)
		m := descPattern.FindStringSubmatch((<-ch).String())
		if m == nil {
			t.Fatalf("cannot read %T's description", c)
		}
		out = append(out, seriesDesc{name: m[1], typ: typ, labels: m[2]})
	}
	return out
}

func TestKubeProxySeriesAsUpstreamDeclaresThem(t *testing.T) {
	for _, mode := range Modes {
		var want []seriesDesc
		for _, s := range kubeProxySeries {
			if s.mode == "" || s.mode == mode {
				want = append(want, seriesDesc{name: s.name, typ: s.typ, labels: s.labels})
			}
		}
		got := describe(t, kubeProxyCollectors(mode))
		byName := func(a, b seriesDesc) int { return strings.Compare(a.name, b.name) }
		slices.SortFunc(want, byName)
		slices.SortFunc(got, byName)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(seriesDesc{})); diff != "" {
			t.Errorf("%s mode: kube-proxy's series (-want +got):\n%s", mode, diff)
		}
	}
}

func TestKubeProxyBuckets(t *testing.T) {
	var programming []float64
	programming = append(programming, 0.25, 0.5)
	for s := 1.0; s <= 59; s++ {
		programming = append(programming, s)
	}
	for s := 60.0; s <= 115; s += 5 {
		programming = append(programming, s)
	}
	for s := 120.0; s <= 300; s += 30 {
		programming = append(programming, s)
	}
	var sync []float64
	for i, b := 0, 0.001; i < 15; i, b = i+1, b*2 {
		sync = append(sync, b)
	}
	for name, tc := range map[string]struct {
		vec  *prometheus.HistogramVec
		want []float64
	}{
		"network programming": {metricNetworkProgrammingDuration, programming},
		"sync":                {metricSyncRulesDuration, sync},
		"full sync":           {metricSyncFullRulesDuration, sync},
		"partial sync":        {metricSyncPartialRulesDuration, sync},
		"conntrack":           {metricConntrackReconcileDuration, sync},
	} {
		h := histogram(t, tc.vec, "bucket-test")
		var got []float64
		for _, b := range h.GetBucket() {
			got = append(got, b.GetUpperBound())
		}
		if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(x, y float64) bool { return x == y || (x-y)*(x-y) < 1e-18 })); diff != "" {
			t.Errorf("%s buckets (-want +got):\n%s", name, diff)
		}
		tc.vec.DeleteLabelValues("bucket-test")
	}
}

// histogram reads one series of a histogram vector.
func histogram(t *testing.T, vec *prometheus.HistogramVec, labels ...string) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	must(t, vec.WithLabelValues(labels...).(prometheus.Metric).Write(&m))
	return m.GetHistogram()
}

// resetKubeProxyMetrics empties the vectors a test reads; the plain
// counters are read as deltas.
func resetKubeProxyMetrics() {
	for _, v := range []interface{ Reset() }{
		metricSyncRulesDuration, metricSyncFullRulesDuration, metricSyncPartialRulesDuration,
		metricSyncLastTimestamp, metricSyncLastQueuedTimestamp, metricNetworkProgrammingDuration,
		metricNoLocalEndpoints, metricIPTablesRestoreFailures, metricIPTablesPartialRestoreFailures,
		metricIPTablesRules, metricIPTablesRulesLast, metricHealthz, metricLivez,
	} {
		v.Reset()
	}
}

// TestKubeProxyMetricsFollowSyncs drives syncs of an IPv4 iptables agent
// and reads kube-proxy's series after each.
func TestKubeProxyMetricsFollowSyncs(t *testing.T) {
	resetKubeProxyMetrics()
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	c := newFakeClient()
	a, fk := testAgentWithClock(t, c, clk)
	const v4 = string(corev1.IPv4Protocol)
	serviceChanges, endpointChanges := testutil.ToFloat64(metricServiceChangesTotal), testutil.ToFloat64(metricEndpointChangesTotal)

	// internal: internalTrafficPolicy Local, its only endpoint on another
	// node. external: a NodePort with externalTrafficPolicy Local, the
	// same. web: served here.
	internal := svc("internal", "10.96.0.11", func(s *corev1.Service) {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	})
	external := svc("external", "10.96.0.12", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	})
	web := svc("web", "10.96.0.10", nil)
	elsewhere := func(name string) *discoveryv1.EndpointSlice {
		s := epSlice(name, name+"-1", "10.244.1.5")
		s.Endpoints[0].NodeName = ptr.To("node-b")
		return s
	}
	// The trigger time is the API server's clock, which the agent reads as
	// wall time.
	trigger := time.Now().Add(-1500 * time.Millisecond)
	webSlice := epSlice("web", "web-1", "10.244.0.5")
	webSlice.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	for _, o := range []client.Object{internal, external, web, elsewhere("internal"), elsewhere("external"), webSlice} {
		must(t, c.Create(ctx, o))
		a.changed(nil, o)
	}
	// An IPv6 slice is not this IPv4 node's.
	v6 := epSlice("web", "web-v6", "fd00::5")
	v6.AddressType = "IPv6"
	a.changed(nil, v6)

	if got := testutil.ToFloat64(metricServiceChangesPending); got != 3 {
		t.Errorf("service changes pending = %v, want 3", got)
	}
	if got := testutil.ToFloat64(metricEndpointChangesPending); got != 3 {
		t.Errorf("endpoint changes pending = %v, want 3", got)
	}
	if got := testutil.ToFloat64(metricSyncLastQueuedTimestamp.WithLabelValues(v4)); got != unixSeconds(clk.Now()) {
		t.Errorf("last queued timestamp = %v, want %v", got, unixSeconds(clk.Now()))
	}

	clk.Step(time.Second)
	must(t, a.SyncOnce(ctx))
	for name, tc := range map[string]struct {
		got, want float64
	}{
		"service changes total":    {testutil.ToFloat64(metricServiceChangesTotal) - serviceChanges, 3},
		"endpoint changes total":   {testutil.ToFloat64(metricEndpointChangesTotal) - endpointChanges, 3},
		"service changes pending":  {testutil.ToFloat64(metricServiceChangesPending), 0},
		"endpoint changes pending": {testutil.ToFloat64(metricEndpointChangesPending), 0},
		"last timestamp":           {testutil.ToFloat64(metricSyncLastTimestamp.WithLabelValues(v4)), unixSeconds(clk.Now())},
		"no local, internal":       {testutil.ToFloat64(metricNoLocalEndpoints.WithLabelValues("internal", v4)), 1},
		"no local, external":       {testutil.ToFloat64(metricNoLocalEndpoints.WithLabelValues("external", v4)), 1},
		"syncs":                    {float64(histogram(t, metricSyncRulesDuration, v4).GetSampleCount()), 1},
		"full syncs":               {float64(histogram(t, metricSyncFullRulesDuration, v4).GetSampleCount()), 1},
		"partial syncs":            {float64(histogram(t, metricSyncPartialRulesDuration, v4).GetSampleCount()), 0},
		"programming latencies":    {float64(histogram(t, metricNetworkProgrammingDuration, v4).GetSampleCount()), 1},
		"filter rules, written":    {testutil.ToFloat64(metricIPTablesRulesLast.WithLabelValues("filter", v4)), testutil.ToFloat64(metricIPTablesRules.WithLabelValues("filter", v4))},
		"nat rules, written":       {testutil.ToFloat64(metricIPTablesRulesLast.WithLabelValues("nat", v4)), testutil.ToFloat64(metricIPTablesRules.WithLabelValues("nat", v4))},
	} {
		if tc.got != tc.want {
			t.Errorf("after the first sync, %s = %v, want %v", name, tc.got, tc.want)
		}
	}
	if lat := histogram(t, metricNetworkProgrammingDuration, v4).GetSampleSum(); lat < 1.5 || lat > 60 {
		t.Errorf("network programming latency = %vs, want the trigger's age, about 1.5s", lat)
	}
	natRules := testutil.ToFloat64(metricIPTablesRules.WithLabelValues("nat", v4))
	if natRules < 10 || testutil.ToFloat64(metricIPTablesRules.WithLabelValues("filter", v4)) < 1 {
		t.Errorf("iptables rules: nat %v, filter %v; want the rules of three Services", natRules, testutil.ToFloat64(metricIPTablesRules.WithLabelValues("filter", v4)))
	}

	// A local endpoint for internal: a partial sync writes its chains only.
	local := epSlice("internal", "internal-2", "10.244.0.9")
	must(t, c.Create(ctx, local))
	a.changed(nil, local)
	clk.Step(time.Second)
	must(t, a.SyncOnce(ctx))
	if got := float64(histogram(t, metricSyncPartialRulesDuration, v4).GetSampleCount()); got != 1 {
		t.Errorf("partial syncs = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metricNoLocalEndpoints.WithLabelValues("internal", v4)); got != 0 {
		t.Errorf("no local, internal = %v after a local endpoint came, want 0", got)
	}
	if last, total := testutil.ToFloat64(metricIPTablesRulesLast.WithLabelValues("nat", v4)), testutil.ToFloat64(metricIPTablesRules.WithLabelValues("nat", v4)); last == 0 || last >= total {
		t.Errorf("nat rules written by the partial sync = %v of %v, want some, not all", last, total)
	}

	// A refused partial restore, then a refused full one.
	for i, want := range []struct{ restore, partial float64 }{{1, 1}, {2, 1}} {
		must(t, c.Delete(ctx, local))
		a.note(nil, local, true)
		fk.FailNext = errors.New("iptables-restore: line 3 failed")
		if err := a.SyncOnce(ctx); err == nil {
			t.Fatal("a refused restore synced")
		}
		if got := testutil.ToFloat64(metricIPTablesRestoreFailures.WithLabelValues(v4)); got != want.restore {
			t.Errorf("failure %d: restore failures = %v, want %v", i+1, got, want.restore)
		}
		if got := testutil.ToFloat64(metricIPTablesPartialRestoreFailures.WithLabelValues(v4)); got != want.partial {
			t.Errorf("failure %d: partial restore failures = %v, want %v", i+1, got, want.partial)
		}
		local.ResourceVersion = ""
		must(t, c.Create(ctx, local))
	}
	if got := testutil.ToFloat64(metricSyncLastTimestamp.WithLabelValues(v4)); got != unixSeconds(clk.Now()) {
		t.Errorf("last timestamp moved on failed syncs: %v, want %v", got, unixSeconds(clk.Now()))
	}
}

// TestHealthAnswersCounted: /healthz and /livez answers are counted by
// code, as kube-proxy counts them; /readyz's are not.
func TestHealthAnswersCounted(t *testing.T) {
	resetKubeProxyMetrics()
	clk := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	a, _ := testAgentWithClock(t, newFakeClient(), clk)
	h := (&healthzServer{agent: a, log: logr.Discard()}).handler()
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if code := get("/livez"); code != http.StatusOK {
		t.Fatalf("/livez = %d before the timeout, want 200", code)
	}
	clk.Step(a.cfg.HealthTimeout + time.Second)
	get("/livez")
	get("/livez")
	get("/healthz") // no Node: 503
	get("/readyz")
	for name, tc := range map[string]struct {
		got, want float64
	}{
		"livez 200":   {testutil.ToFloat64(metricLivez.WithLabelValues("200")), 1},
		"livez 503":   {testutil.ToFloat64(metricLivez.WithLabelValues("503")), 2},
		"healthz 503": {testutil.ToFloat64(metricHealthz.WithLabelValues("503")), 1},
		"healthz 200": {testutil.ToFloat64(metricHealthz.WithLabelValues("200")), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
}

// mixinCommit is the kubernetes-monitoring/kubernetes-mixin commit whose
// proxy dashboard (dashboards/proxy.libsonnet) and kube-proxy alerts
// (alerts/kube_proxy.libsonnet: KubeProxyDown, absent(up{job="kube-proxy"}),
// and KubeProxyInstanceUnreachable, up == 0) mixinSeries is taken from.
// up, job, instance and cluster are the scrape's, not the agent's.
const mixinCommit = "aa38e2bfa7ea6ec6870420b483046afe790a6411"

// mixinSeries are the series the dashboard queries, each with the labels
// (beyond the scrape's) its queries select or group by.
var mixinSeries = map[string][]string{
	"kubeproxy_sync_proxy_rules_duration_seconds":    {"le"},
	"kubeproxy_network_programming_duration_seconds": {"le"},
	"rest_client_requests_total":                     {"code"},
	"rest_client_request_duration_seconds":           {"verb", "le"},
	"process_resident_memory_bytes":                  nil,
	"process_cpu_seconds_total":                      nil,
	"go_goroutines":                                  nil,
}

func TestMixinProxyDashboardSeriesExported(t *testing.T) {
	registerMetrics(ModeIPTables)
	ctx := context.Background()
	c := newFakeClient()
	a, _ := testAgent(t, c)
	web := svc("web", "10.96.0.10", nil)
	slice := epSlice("web", "web-1", "10.244.0.5")
	slice.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Add(time.Second).Format(time.RFC3339Nano)}
	for _, o := range []client.Object{web, slice} {
		must(t, c.Create(ctx, o))
		a.changed(nil, o)
	}
	must(t, a.SyncOnce(ctx))
	// What client-go reports of each request to the API server.
	u, err := url.Parse("https://10.96.0.1/api/v1/services")
	must(t, err)
	clientmetrics.RequestResult.Increment(ctx, "200", "GET", u.Host)
	clientmetrics.RequestLatency.Observe(ctx, "POST", *u, 20*time.Millisecond)

	families, err := ctrlmetrics.Registry.Gather()
	must(t, err)
	labels := map[string]map[string]bool{}
	for _, f := range families {
		labels[f.GetName()] = map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[f.GetName()][l.GetName()] = true
			}
			if m.GetHistogram() != nil {
				labels[f.GetName()]["le"] = true
			}
		}
	}
	for name, want := range mixinSeries {
		got, ok := labels[name]
		if !ok {
			t.Errorf("%s (kubernetes-mixin %.12s) is not exported", name, mixinCommit)
			continue
		}
		for _, l := range want {
			if !got[l] {
				t.Errorf("%s has no label %s (kubernetes-mixin %.12s)", name, l, mixinCommit)
			}
		}
	}
}

// TestChangesCountedAsKubeProxyPerFamily checks the change counters on
// single- and dual-stack nodes against kube-proxy's, which runs a
// proxier per family: each proxier counts every Service event, so a
// dual-stack node counts a Service change twice, and only the proxier of
// a slice's family counts it, so a slice counts once, and not at all on
// a node without its family.
func TestChangesCountedAsKubeProxyPerFamily(t *testing.T) {
	const v4, v6 = corev1.IPv4Protocol, corev1.IPv6Protocol
	cases := map[string]struct {
		families                    []corev1.IPFamily
		wantServices, wantEndpoints float64
	}{
		"IPv4 node":       {families: []corev1.IPFamily{v4}, wantServices: 2, wantEndpoints: 1},
		"IPv6 node":       {families: []corev1.IPFamily{v6}, wantServices: 2, wantEndpoints: 1},
		"dual-stack node": {families: []corev1.IPFamily{v4, v6}, wantServices: 4, wantEndpoints: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var backends []dataplane.Backend
			for _, f := range tc.families {
				backends = append(backends, iptables.NewBackend(f, iptables.NewFake(), iptables.Config{}))
			}
			a := newAgent(newFakeClient(), testConfig(t), logr.Discard(), clock.RealClock{}, backends)
			services, endpoints := testutil.ToFloat64(metricServiceChangesTotal), testutil.ToFloat64(metricEndpointChangesTotal)
			web := svc("web", "10.96.0.10", nil)
			a.changed(nil, web)
			a.changed(web, web)
			a.changed(nil, epSlice("web", "web-1", "10.244.0.5"))
			sliceV6 := epSlice("web", "web-2", "fd00::5")
			sliceV6.AddressType = discoveryv1.AddressTypeIPv6
			a.changed(nil, sliceV6)
			if got := testutil.ToFloat64(metricServiceChangesTotal) - services; got != tc.wantServices {
				t.Errorf("service changes total grew by %v, want %v", got, tc.wantServices)
			}
			if got := testutil.ToFloat64(metricEndpointChangesTotal) - endpoints; got != tc.wantEndpoints {
				t.Errorf("endpoint changes total grew by %v, want %v", got, tc.wantEndpoints)
			}
		})
	}
}
