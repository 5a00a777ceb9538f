// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
)

// healthWorld is an agent on a fake client and a Fake kernel with a fake
// clock, whose steps can be made to fail.
type healthWorld struct {
	agent              *Agent
	client             client.Client
	clock              *clocktesting.FakeClock
	kernel             *iptables.Fake
	failNode, failList bool
}

func newHealthWorld(t *testing.T) *healthWorld {
	t.Helper()
	w := &healthWorld{clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), kernel: iptables.NewFake()}
	broken := errors.New("the cache is gone")
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithIndex(&discoveryv1.EndpointSlice{}, sliceServiceIndex, sliceServiceIndexValue).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.Node); ok && w.failNode {
					return broken
				}
				return c.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if w.failList {
					return broken
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()
	ctx := context.Background()
	w.client = c
	must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}))
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.1.2")))
	backend := iptables.NewBackend(corev1.IPv4Protocol, w.kernel, iptables.Config{})
	w.agent = newAgent(c, testConfig(t), logr.Discard(), w.clock, []dataplane.Backend{backend})
	return w
}

// body is what /healthz (or another path) answers now.
func (w *healthWorld) body(t *testing.T, path string) (int, Health) {
	t.Helper()
	rec := httptest.NewRecorder()
	(&healthzServer{agent: w.agent, log: logr.Discard()}).handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var h Health
	must(t, json.Unmarshal(rec.Body.Bytes(), &h))
	return rec.Code, h
}

// TestHealthFailsOnceAChangeWaitedTooLongWhateverTheCause checks, for
// each step of a sync that can fail, that /livez stays healthy while
// the first change has waited at most the health timeout, fails after
// it with the step in the body and the metric, and recovers with the
// next successful sync.
func TestHealthFailsOnceAChangeWaitedTooLongWhateverTheCause(t *testing.T) {
	cases := map[string]struct {
		reason string
		// breakIt makes the next sync fail at the step; fix undoes it.
		breakIt, fix func(*healthWorld)
	}{
		"the Node cannot be read": {ReasonNode,
			func(w *healthWorld) { w.failNode = true }, func(w *healthWorld) { w.failNode = false }},
		"the Services cannot be read": {ReasonRender,
			func(w *healthWorld) { w.failList = true }, func(w *healthWorld) { w.failList = false }},
		"the node's addresses cannot be listed": {ReasonNodeAddresses,
			func(w *healthWorld) {
				w.agent.cfg.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
				w.agent.cfg.NetNS = filepath.Join(t.TempDir(), "no-such-netns")
			},
			func(w *healthWorld) { w.agent.cfg.NetNS = "" }},
		"the live rules cannot be read": {ReasonList,
			func(w *healthWorld) { w.kernel.FailNextSave = errors.New("iptables-save: exit status 4") }, func(*healthWorld) {}},
		"the transaction is refused": {ReasonApply,
			func(w *healthWorld) { w.kernel.FailNext = errors.New("iptables-restore: line 3 failed") }, func(*healthWorld) {}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			failures := testutil.ToFloat64(metricSyncFailures.WithLabelValues(tc.reason))
			tc.breakIt(w)
			err := w.agent.SyncOnce(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), tc.reason+": ") {
				t.Fatalf("sync: got %v, want a failure of step %q", err, tc.reason)
			}
			if got := testutil.ToFloat64(metricSyncFailures.WithLabelValues(tc.reason)) - failures; got != 1 {
				t.Errorf("svcnet_agent_sync_failures_total{reason=%q} grew by %v, want 1", tc.reason, got)
			}
			timeout := w.agent.cfg.HealthTimeout
			w.clock.Step(timeout - time.Millisecond)
			if code, h := w.body(t, "/livez"); code != http.StatusOK || !h.Healthy || h.Reason != tc.reason || h.Ready {
				t.Fatalf("after waiting just under the timeout: %d %+v; want 200, healthy, not ready, reason %q", code, h, tc.reason)
			}
			// A change arriving later does not make the wait look shorter;
			// as kube-proxy's, the wait fails once it reaches the timeout.
			w.agent.changed(nil, svc("web", "10.96.0.10", nil))
			w.clock.Step(time.Millisecond)
			code, h := w.body(t, "/livez")
			if code != http.StatusServiceUnavailable || h.Healthy || h.Reason != tc.reason || h.Error == "" {
				t.Fatalf("after waiting the timeout: %d %+v; want 503 with reason %q and the error", code, h, tc.reason)
			}
			if h.OldestQueuedChange == nil || !h.OldestQueuedChange.Equal(w.clock.Now().Add(-timeout)) {
				t.Errorf("oldest queued change %v, want the first sync's queueing at %v", h.OldestQueuedChange, w.clock.Now().Add(-timeout))
			}
			if code, _ := w.body(t, "/readyz"); code != http.StatusServiceUnavailable {
				t.Errorf("/readyz answered %d while unhealthy, want 503", code)
			}

			tc.fix(w)
			must(t, w.agent.SyncOnce(ctx))
			code, h = w.body(t, "/livez")
			if code != http.StatusOK || !h.Healthy || h.Reason != "" || h.OldestQueuedChange != nil || !h.LastUpdated.Equal(w.clock.Now()) {
				t.Fatalf("after a successful sync: %d %+v; want 200, healthy, nothing waiting, updated now", code, h)
			}
			if code, h := w.body(t, "/readyz"); code != http.StatusOK || !h.Ready {
				t.Errorf("/readyz after a successful sync: %d %+v, want 200 and ready", code, h)
			}
		})
	}
}

// TestHealthCountsAChangeNoSyncHasTaken checks that a change nothing has
// failed on, but that no sync applied (the loop stuck, or one sync running
// for longer than the timeout), makes the agent unhealthy too.
func TestHealthCountsAChangeNoSyncHasTaken(t *testing.T) {
	w := newHealthWorld(t)
	must(t, w.agent.SyncOnce(context.Background()))
	w.clock.Step(time.Hour)
	if _, h := w.body(t, "/healthz"); !h.Healthy {
		t.Fatalf("idle for an hour with nothing queued: %+v, want healthy", h)
	}
	w.agent.changed(nil, svc("web", "10.96.0.10", nil))
	w.clock.Step(w.agent.cfg.HealthTimeout + time.Millisecond)
	code, h := w.body(t, "/livez")
	if code != http.StatusServiceUnavailable || h.Healthy || h.Reason != "" {
		t.Fatalf("a change waiting past the timeout: %d %+v, want 503 and no failed step", code, h)
	}
	// The sync has taken the change but not applied it yet.
	work := w.agent.takePending()
	if _, h := w.body(t, "/healthz"); h.Healthy {
		t.Fatalf("a change taken by a running sync is still waiting: %+v, want unhealthy", h)
	}
	_ = w.agent.failed(work, ReasonApply, errors.New("refused"))
	must(t, w.agent.SyncOnce(context.Background()))
	if _, h := w.body(t, "/healthz"); !h.Healthy || h.Reason != "" {
		t.Fatalf("after the change was applied: %+v, want healthy", h)
	}
}

// TestHealthServerWaitsForItsAddress holds the health address as the
// agent Pod being replaced does, and checks that the server neither fails
// nor gives up: it serves once the address is free, and stops with ctx
// while it waits.
func TestHealthServerWaitsForItsAddress(t *testing.T) {
	w := newHealthWorld(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := held.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- (&healthzServer{addr: addr, agent: w.agent, log: logr.Discard()}).Start(ctx) }()
	time.Sleep(2 * listenRetry)
	select {
	case err := <-done:
		t.Fatalf("the health server stopped while its address was held: %v", err)
	default:
	}
	must(t, held.Close())
	var resp *http.Response
	for deadline := time.Now().Add(10 * listenRetry); ; time.Sleep(50 * time.Millisecond) {
		if resp, err = http.Get("http://" + addr + "/readyz"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health server does not answer after its address was freed: %v", err)
		}
	}
	_ = resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start after ctx ended: %v", err)
	}

	// Stopped while still waiting for the address.
	held, err = net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer held.Close()
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		done <- (&healthzServer{addr: held.Addr().String(), agent: w.agent, log: logr.Discard()}).Start(ctx)
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start stopped while waiting: %v", err)
		}
	case <-time.After(5 * listenRetry):
		t.Fatal("Start did not return after ctx ended while it waited for its address")
	}
}

// TestHealthServerFailsOnABadAddress: an address that can never be
// listened on stops the agent with the address named.
func TestHealthServerFailsOnABadAddress(t *testing.T) {
	w := newHealthWorld(t)
	err := (&healthzServer{addr: "192.0.2.1:10256", agent: w.agent, log: logr.Discard()}).Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "192.0.2.1:10256") {
		t.Fatalf("Start on an address not on this host = %v, want an error naming it", err)
	}
}

// TestHealthzFailsOnANodeLeavingTheCluster checks /healthz against
// kube-proxy's node eligibility: 503 with nodeEligible false while the
// Node is missing, being deleted, or tainted by the cluster autoscaler,
// while /livez, which reports staleness alone, stays 200.
func TestHealthzFailsOnANodeLeavingTheCluster(t *testing.T) {
	cases := map[string]struct {
		change   func(*corev1.Node)
		missing  bool
		eligible bool
	}{
		"a plain Node": {change: func(*corev1.Node) {}, eligible: true},
		"another taint": {change: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}}
		}, eligible: true},
		"tainted ToBeDeletedByClusterAutoscaler": {change: func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: TaintToBeDeleted, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
		}},
		"being deleted": {change: func(n *corev1.Node) {
			n.Finalizers = []string{"example.com/hold"}
		}},
		"missing": {missing: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			must(t, w.agent.SyncOnce(ctx))
			var n corev1.Node
			must(t, w.client.Get(ctx, client.ObjectKey{Name: "node-a"}, &n))
			switch {
			case tc.missing:
				must(t, w.client.Delete(ctx, &n))
			default:
				tc.change(&n)
				must(t, w.client.Update(ctx, &n))
				if name == "being deleted" {
					must(t, w.client.Delete(ctx, &n))
				}
			}
			code, h := w.body(t, "/healthz")
			wantCode := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[tc.eligible]
			if code != wantCode || h.NodeEligible == nil || *h.NodeEligible != tc.eligible || !h.Healthy {
				t.Errorf("/healthz: %d %+v; want %d, nodeEligible %t, healthy", code, h, wantCode, tc.eligible)
			}
			if code, h := w.body(t, "/livez"); code != http.StatusOK || h.NodeEligible != nil {
				t.Errorf("/livez: %d %+v; want 200 without nodeEligible", code, h)
			}
		})
	}
}

// TestHealthzBodyHasKubeProxysFields checks the field names operators'
// probes and scripts read from kube-proxy's /healthz.
func TestHealthzBodyHasKubeProxysFields(t *testing.T) {
	w := newHealthWorld(t)
	must(t, w.agent.SyncOnce(context.Background()))
	rec := httptest.NewRecorder()
	(&healthzServer{agent: w.agent, log: logr.Discard()}).handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var body map[string]any
	must(t, json.Unmarshal(rec.Body.Bytes(), &body))
	for _, field := range []string{"lastUpdated", "currentTime", "nodeEligible", "healthy", "status"} {
		if _, ok := body[field]; !ok {
			t.Errorf("/healthz body %s has no %q", rec.Body.String(), field)
		}
	}
	status, _ := body["status"].(map[string]any)
	if _, ok := status["IPv4"].(map[string]any)["healthy"]; !ok {
		t.Errorf("/healthz status %v has no IPv4 health", status)
	}
}

// TestProxyMode checks /proxyMode as kube-proxy's metrics server answers
// it: the mode alone, as plain text.
func TestProxyMode(t *testing.T) {
	for _, mode := range []string{ModeIPTables, ModeNFTables} {
		rec := httptest.NewRecorder()
		proxyModeHandler(mode).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/proxyMode", nil))
		if rec.Code != http.StatusOK || rec.Body.String() != mode || rec.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("/proxyMode in %s mode: %d %q %q", mode, rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"))
		}
	}
}

// TestMetricsServerWaitsForItsAddress: kube-proxy still running on the
// node holds 127.0.0.1:10249 while the agent starts beside it; the
// agent's metrics server waits instead of stopping the agent, then serves
// kube-proxy's paths once the address is free.
func TestMetricsServerWaitsForItsAddress(t *testing.T) {
	registerMetrics(ModeIPTables)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := held.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var blocked atomic.Int32
	srv := &retryingServer{what: "Metrics server", addr: addr, handler: metricsHandler(Config{Mode: ModeNFTables}), log: logr.Discard(),
		onBlocked: func(error) { blocked.Add(1) }}
	go func() { done <- srv.Start(ctx) }()
	time.Sleep(2 * listenRetry)
	select {
	case err := <-done:
		t.Fatalf("the metrics server stopped while its address was held: %v", err)
	default:
	}
	if n := blocked.Load(); n != 1 {
		t.Errorf("the held address was reported %d times, want once (one Event on the Node)", n)
	}
	must(t, held.Close())
	get := func(path string) (int, string) {
		t.Helper()
		for deadline := time.Now().Add(10 * listenRetry); ; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				must(t, err)
				return resp.StatusCode, string(body)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the metrics server does not answer %s after its address was freed: %v", path, err)
			}
		}
	}
	if code, body := get("/proxyMode"); code != http.StatusOK || body != ModeNFTables {
		t.Errorf("/proxyMode = %d %q, want 200 %q", code, body, ModeNFTables)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "kubeproxy_sync_proxy_rules_endpoint_changes_total") {
		t.Errorf("/metrics = %d, want 200 with the agent's series; got:\n%.500s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start after ctx ended: %v", err)
	}
}

// TestHealthIsPerFamily runs a dual-stack agent whose IPv6 backend
// refuses a sync that the IPv4 one applies, and checks the health body
// and the per-family series against kube-proxy's two proxiers, of which
// only the IPv6 one would have failed: IPv4's status is healthy and
// updated at that sync, its trigger times are measured then; IPv6's
// keeps its older lastUpdated, turns unhealthy once the wait reaches
// the timeout (and the whole agent with it), and is measured when its
// next sync applies the change.
func TestHealthIsPerFamily(t *testing.T) {
	type status = map[corev1.IPFamily]FamilyHealth
	const v4, v6 = corev1.IPv4Protocol, corev1.IPv6Protocol
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	synced := start.Add(time.Second)
	cases := map[string]struct {
		// failIPv6 makes the IPv6 backend refuse the sync at synced;
		// recover syncs again, successfully, after wait.
		failIPv6, recover bool
		wait              time.Duration // from synced, in units of the health timeout minus a millisecond
		waitTimeout       bool          // wait exactly the health timeout instead
		wantCode          int
		wantHealthy       bool
		wantStatus        func(now time.Time) status
		// wantLatencies are the programming latencies measured, by family.
		wantLatencies map[corev1.IPFamily]uint64
	}{
		"both families apply": {
			wantCode: http.StatusOK, wantHealthy: true,
			wantStatus:    func(time.Time) status { return status{v4: {synced, true}, v6: {synced, true}} },
			wantLatencies: map[corev1.IPFamily]uint64{v4: 1, v6: 1},
		},
		"IPv6 refuses, under the timeout": {
			failIPv6: true, wait: 1,
			wantCode: http.StatusOK, wantHealthy: true,
			wantStatus:    func(time.Time) status { return status{v4: {synced, true}, v6: {start, true}} },
			wantLatencies: map[corev1.IPFamily]uint64{v4: 1, v6: 0},
		},
		"IPv6 refuses, the timeout reached": {
			failIPv6: true, waitTimeout: true,
			wantCode: http.StatusServiceUnavailable, wantHealthy: false,
			wantStatus:    func(time.Time) status { return status{v4: {synced, true}, v6: {start, false}} },
			wantLatencies: map[corev1.IPFamily]uint64{v4: 1, v6: 0},
		},
		"IPv6 refuses, then applies": {
			failIPv6: true, waitTimeout: true, recover: true,
			wantCode: http.StatusOK, wantHealthy: true,
			wantStatus:    func(now time.Time) status { return status{v4: {now, true}, v6: {now, true}} },
			wantLatencies: map[corev1.IPFamily]uint64{v4: 1, v6: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			kernel6 := iptables.NewFake()
			backends := []dataplane.Backend{
				iptables.NewBackend(v4, w.kernel, iptables.Config{}),
				iptables.NewBackend(v6, kernel6, iptables.Config{}),
			}
			// The agent starts at start; its first changes come a second later.
			w.agent = newAgent(w.client, testConfig(t), logr.Discard(), w.clock, backends)
			if _, h := w.body(t, "/livez"); !cmp.Equal(h.Status, status{v4: {start, true}, v6: {start, true}}) || !h.LastUpdated.Equal(start) {
				t.Fatalf("before the first sync: %+v, want both families healthy, updated at the start", h)
			}
			must(t, w.agent.SyncOnce(ctx))
			w.clock.SetTime(synced)
			before := map[corev1.IPFamily]uint64{}
			for _, f := range []corev1.IPFamily{v4, v6} {
				before[f] = histogram(t, metricNetworkProgrammingDuration, string(f)).GetSampleCount()
			}
			// A dual-stack Service's change waits in both families.
			w.agent.changed(nil, dualStack(svc("web", "10.96.0.10", nil), "fd00:96::10"))
			w.agent.mu.Lock()
			w.agent.triggers = []changeTrigger{{family: v4, at: time.Now()}, {family: v6, at: time.Now()}}
			w.agent.mu.Unlock()
			if tc.failIPv6 {
				kernel6.FailNext = errors.New("ip6tables-restore: line 3 failed")
				backends[1].ForceFull() // so that the IPv6 backend writes
				if err := w.agent.SyncOnce(ctx); err == nil {
					t.Fatal("the sync succeeded, want the IPv6 backend's failure")
				}
			} else {
				must(t, w.agent.SyncOnce(ctx))
			}
			timeout := w.agent.cfg.HealthTimeout
			switch {
			case tc.waitTimeout:
				w.clock.Step(timeout)
			case tc.wait > 0:
				w.clock.Step(timeout - time.Millisecond)
			}
			if tc.recover {
				must(t, w.agent.SyncOnce(ctx))
			}
			rec := httptest.NewRecorder()
			(&healthzServer{agent: w.agent, log: logr.Discard()}).handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
			var h Health
			must(t, json.Unmarshal(rec.Body.Bytes(), &h))
			if rec.Code != tc.wantCode || h.Healthy != tc.wantHealthy {
				t.Errorf("/livez %d healthy %v, want %d healthy %v", rec.Code, h.Healthy, tc.wantCode, tc.wantHealthy)
			}
			if diff := cmp.Diff(tc.wantStatus(w.clock.Now()), h.Status); diff != "" {
				t.Errorf("status by family (-want +got):\n%s", diff)
			}
			got := map[corev1.IPFamily]uint64{}
			for _, f := range []corev1.IPFamily{v4, v6} {
				got[f] = histogram(t, metricNetworkProgrammingDuration, string(f)).GetSampleCount() - before[f]
			}
			if diff := cmp.Diff(tc.wantLatencies, got); diff != "" {
				t.Errorf("network programming latencies measured (-want +got):\n%s", diff)
			}
		})
	}
}

// dualStack makes s a dual-stack Service, IPv4 first, with ipv6 as its
// IPv6 ClusterIP.
func dualStack(s *corev1.Service, ipv6 string) *corev1.Service {
	s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, ipv6)
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	return s
}

// TestChangesWaitInTheirFamilies checks, on a dual-stack node, which
// families a change that no sync applies makes unhealthy once it waited
// the health timeout, and which families' last queued timestamp it
// moves: as kube-proxy's per-family proxiers, those the change is of (a
// slice's address type, a Service's ClusterIP families; none for a
// headless Service, whose change no proxier queues), every family for
// the Node's zone, and none for the Node's status or a ServiceCIDR,
// which no proxier queues either.
func TestChangesWaitInTheirFamilies(t *testing.T) {
	const v4, v6 = corev1.IPv4Protocol, corev1.IPv6Protocol
	sliceV6 := epSlice("web", "web-2", "fd00:244::5")
	sliceV6.AddressType = discoveryv1.AddressTypeIPv6
	headless := svc("db", corev1.ClusterIPNone, nil)
	node := func(zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
		if zone != "" {
			n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
		}
		return n
	}
	cases := map[string]struct {
		old, obj any
		waiting  []corev1.IPFamily
	}{
		"an IPv4 slice":          {obj: epSlice("web", "web-1", "10.244.1.5"), waiting: []corev1.IPFamily{v4}},
		"an IPv6 slice":          {obj: sliceV6, waiting: []corev1.IPFamily{v6}},
		"an IPv4 Service":        {obj: svc("api", "10.96.0.11", nil), waiting: []corev1.IPFamily{v4}},
		"a dual-stack Service":   {obj: dualStack(svc("api", "10.96.0.11", nil), "fd00:96::11"), waiting: []corev1.IPFamily{v4, v6}},
		"IPv4 to dual-stack":     {old: svc("api", "10.96.0.11", nil), obj: dualStack(svc("api", "10.96.0.11", nil), "fd00:96::11"), waiting: []corev1.IPFamily{v4, v6}},
		"a headless Service":     {obj: headless},
		"the Node's zone":        {old: node(""), obj: node("zone-b"), waiting: []corev1.IPFamily{v4, v6}},
		"the Node's status only": {old: node("zone-b"), obj: node("zone-b")},
		"a ServiceCIDR": {obj: &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "more"},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/16"}}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			backends := []dataplane.Backend{
				iptables.NewBackend(v4, w.kernel, iptables.Config{}),
				iptables.NewBackend(v6, iptables.NewFake(), iptables.Config{}),
			}
			w.agent = newAgent(w.client, testConfig(t), logr.Discard(), w.clock, backends)
			must(t, w.agent.SyncOnce(ctx))
			w.clock.Step(time.Second)
			// Every world's clock starts at the same time: clear the gauges.
			for _, f := range []corev1.IPFamily{v4, v6} {
				metricSyncLastQueuedTimestamp.WithLabelValues(string(f)).Set(0)
			}
			w.agent.changed(tc.old, tc.obj)
			w.clock.Step(w.agent.cfg.HealthTimeout)
			_, h := w.body(t, "/livez")
			for _, f := range []corev1.IPFamily{v4, v6} {
				waits := slices.Contains(tc.waiting, f)
				if got := h.Status[f].Healthy; got == waits {
					t.Errorf("%s healthy %v after the timeout, want %v", f, got, !waits)
				}
				moved := testutil.ToFloat64(metricSyncLastQueuedTimestamp.WithLabelValues(string(f))) != 0
				if moved != waits {
					t.Errorf("%s last queued timestamp moved: %v, want %v", f, moved, waits)
				}
			}
			if want := len(tc.waiting) == 0; h.Healthy != want {
				t.Errorf("healthy %v, want %v", h.Healthy, want)
			}
		})
	}
}
