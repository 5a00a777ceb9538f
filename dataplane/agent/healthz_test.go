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
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
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
			w.clock.Step(timeout)
			if code, h := w.body(t, "/livez"); code != http.StatusOK || !h.Healthy || h.Reason != tc.reason || h.Ready {
				t.Fatalf("after waiting exactly the timeout: %d %+v; want 200, healthy, not ready, reason %q", code, h, tc.reason)
			}
			// A change arriving later does not make the wait look shorter.
			w.agent.changed(nil, svc("web", "10.96.0.10", nil))
			w.clock.Step(time.Second)
			code, h := w.body(t, "/livez")
			if code != http.StatusServiceUnavailable || h.Healthy || h.Reason != tc.reason || h.Error == "" {
				t.Fatalf("after waiting longer than the timeout: %d %+v; want 503 with reason %q and the error", code, h, tc.reason)
			}
			if h.OldestQueuedChange == nil || !h.OldestQueuedChange.Equal(w.clock.Now().Add(-timeout-time.Second)) {
				t.Errorf("oldest queued change %v, want the first sync's queueing at %v", h.OldestQueuedChange, w.clock.Now().Add(-timeout-time.Second))
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
