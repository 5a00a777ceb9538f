// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
)

// localLB is a LoadBalancer Service with externalTrafficPolicy Local and
// health check node port 30100, serving two ports.
func localLB() *corev1.Service {
	return svc("lb", "10.96.0.20", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30100
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30001, Protocol: corev1.ProtocolTCP},
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443), NodePort: 30002, Protocol: corev1.ProtocolTCP},
		}
	})
}

// endpoint is one endpoint of a slice of localLB: its address, node and
// conditions.
type endpoint struct {
	ip, node                    string
	ready, serving, terminating bool
}

// lbSlice is localLB's slice with both ports on every endpoint.
func lbSlice(eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "lb-1", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "lb"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ep.ip},
			NodeName:  ptr.To(ep.node),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(ep.ready), Serving: ptr.To(ep.serving), Terminating: ptr.To(ep.terminating),
			},
		})
	}
	return s
}

// TestHealthCheckNodePortAnswersAsKubeProxy checks the health check node
// port's answer for each state of a rollout: the count is of distinct
// ready local addresses (not multiplied by the Service's two ports),
// terminating local endpoints alone answer 503 though they still get
// traffic, and a proxy whose rules are stale answers 503 whatever the
// count; the body is kube-proxy's, byte for byte.
func TestHealthCheckNodePortAnswersAsKubeProxy(t *testing.T) {
	ready := func(ip, node string) endpoint { return endpoint{ip: ip, node: node, ready: true, serving: true} }
	terminating := func(ip string) endpoint { return endpoint{ip: ip, node: "node-a", serving: true, terminating: true} }
	cases := map[string]struct {
		endpoints []endpoint
		stale     bool
		local     int
		code      int
		body      string
	}{
		"two ready local endpoints, each serving both ports": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a"), ready("10.244.1.4", "node-a"), ready("10.244.2.3", "node-b")},
			local:     2,
			code:      http.StatusOK,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"one ready and one terminating local endpoint": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a"), terminating("10.244.1.4")},
			local:     1,
			code:      http.StatusOK,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"only terminating local endpoints, still serving": {
			endpoints: []endpoint{terminating("10.244.1.3"), ready("10.244.2.3", "node-b")},
			code:      http.StatusServiceUnavailable,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"ready local endpoints, but a change has waited past the health timeout": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a")},
			stale:     true,
			local:     1,
			code:      http.StatusServiceUnavailable,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": false\n}",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			must(t, w.client.Create(ctx, localLB()))
			must(t, w.client.Create(ctx, lbSlice(tc.endpoints...)))
			must(t, w.agent.SyncOnce(ctx))
			if tc.stale {
				w.agent.changed(nil, localLB())
				w.clock.Step(w.agent.cfg.HealthTimeout + time.Second)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.168.50.11"), Port: 30100}))
			w.agent.health.handler(30100).ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Errorf("status %d, want %d", rec.Code, tc.code)
			}
			if got := rec.Body.String(); got != tc.body {
				t.Errorf("body\n%s\nwant\n%s", got, tc.body)
			}
			if got, want := rec.Header().Get("X-Load-Balancing-Endpoint-Weight"), strconv.Itoa(tc.local); got != want {
				t.Errorf("X-Load-Balancing-Endpoint-Weight %q, want %q", got, want)
			}
		})
	}
}

// TestHealthCheckNodePortTakenIsReported: a health check node port that
// another process holds (kube-proxy still on the node) gives kube-proxy's
// Warning Event on the Service once, not at every sync, and is served as
// soon as it is free.
func TestHealthCheckNodePortTakenIsReported(t *testing.T) {
	held, err := net.Listen("tcp", ":0")
	must(t, err)
	port := int32(held.Addr().(*net.TCPAddr).Port)
	rec := events.NewFakeRecorder(10)
	h := newHealthServers("", "node-a", logr.Discard(), func() bool { return true })
	h.recorder = rec
	defer h.closeAll()
	entries := map[int32]healthEntry{port: {namespace: "ns", name: "lb", local: map[corev1.IPFamily]int{corev1.IPv4Protocol: 1}}}

	h.update(entries)
	h.update(entries)
	select {
	case e := <-rec.Events:
		if want := "Warning " + EventFailedHealthcheck + " node node-a failed to start healthcheck \"ns/lb\" on port " + strconv.Itoa(int(port)); !strings.HasPrefix(e, want) {
			t.Errorf("event %q, want it to start with %q", e, want)
		}
	default:
		t.Fatal("no Event for a health check node port that is taken")
	}
	select {
	case e := <-rec.Events:
		t.Errorf("a second Event for the same failure: %q", e)
	default:
	}

	must(t, held.Close())
	h.update(entries)
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(port)) + "/")
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health check node port once free: HTTP %d, want 200", resp.StatusCode)
	}
}
