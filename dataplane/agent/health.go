// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// healthEntry is what one health check node port reports.
type healthEntry struct {
	namespace, name string
	// local counts this node's ready endpoints by IP family: distinct
	// addresses, over every port of the Service. A family is present when
	// the Service has rules in it, with 0 when no local endpoint is ready.
	local map[corev1.IPFamily]int
}

// localFor is the count a request that arrived over family f reads, as
// from kube-proxy's health server of that family; a single-stack Service
// answers with its one family's count on both.
func (e healthEntry) localFor(f corev1.IPFamily) int {
	if n, ok := e.local[f]; ok {
		return n
	}
	total := 0
	for _, n := range e.local {
		total += n
	}
	return total
}

// serviceHealth is the body of a health check node port's answer, with
// kube-proxy's fields in kube-proxy's order.
type serviceHealth struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// healthServers serves the healthCheckNodePort of every
// externalTrafficPolicy: Local LoadBalancer Service, the way kube-proxy
// does: 200 while this node has a ready endpoint of the Service and the
// proxy itself is healthy, else 503, so that load balancers send traffic
// only to nodes that can serve it and drain a node whose Pods are all
// terminating or whose rules have gone stale.
type healthServers struct {
	netns string
	log   logr.Logger
	// proxyHealthy is the agent's own health (its /livez): a node whose
	// rules lag behind fails every health check node port too.
	proxyHealthy func() bool

	// recorder, when set, reports a port that cannot be listened on as
	// kube-proxy does: a Warning Event on the Service.
	recorder events.EventRecorder
	node     string

	mu      sync.Mutex
	entries map[int32]healthEntry
	servers map[int32]*http.Server
	// failed is each port's last listen error already reported, so that a
	// port that stays taken is reported once, not at every sync.
	failed map[int32]string
}

// EventFailedHealthcheck is kube-proxy's reason for a health check node
// port that cannot be listened on.
const EventFailedHealthcheck = "FailedToStartServiceHealthcheck"

func newHealthServers(ns, node string, log logr.Logger, proxyHealthy func() bool) *healthServers {
	return &healthServers{netns: ns, node: node, log: log, proxyHealthy: proxyHealthy,
		entries: map[int32]healthEntry{}, servers: map[int32]*http.Server{}, failed: map[int32]string{}}
}

// update opens listeners for new ports, closes the ones no longer used,
// and makes every server answer with the new counts.
func (h *healthServers) update(entries map[int32]healthEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = entries
	for port, srv := range h.servers {
		if _, ok := entries[port]; !ok {
			_ = srv.Close()
			delete(h.servers, port)
		}
	}
	for port := range h.failed {
		if _, ok := entries[port]; !ok {
			delete(h.failed, port)
		}
	}
	for port, e := range entries {
		if _, ok := h.servers[port]; ok {
			continue
		}
		l, err := netns.Listen(h.netns, net.JoinHostPort("", strconv.Itoa(int(port))))
		if err != nil {
			h.reportListenFailure(port, e, err)
			continue
		}
		delete(h.failed, port)
		srv := &http.Server{Handler: h.handler(port), ReadHeaderTimeout: 10 * time.Second}
		h.servers[port] = srv
		go func() { _ = srv.Serve(l) }()
	}
}

// reportListenFailure logs a health check node port that cannot be
// listened on (another process holds it: kube-proxy still on the node,
// or another program) and, once per error, says so on the Service as
// kube-proxy does. The port is tried again at every sync.
func (h *healthServers) reportListenFailure(port int32, e healthEntry, err error) {
	if h.failed[port] == err.Error() {
		return
	}
	h.failed[port] = err.Error()
	h.log.Error(err, "Cannot serve health check node port, retrying at every sync", "port", port, "service", e.namespace+"/"+e.name)
	if h.recorder != nil {
		h.recorder.Eventf(&corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: e.namespace, Name: e.name}, nil,
			corev1.EventTypeWarning, EventFailedHealthcheck, "Listen", "node %s failed to start healthcheck %q on port %d: %v",
			h.node, e.namespace+"/"+e.name, port, err)
	}
}

func (h *healthServers) handler(port int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		e, ok := h.entries[port]
		h.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		var body serviceHealth
		body.Service.Namespace, body.Service.Name = e.namespace, e.name
		body.LocalEndpoints = e.localFor(requestFamily(r))
		body.ServiceProxyHealthy = h.proxyHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(body.LocalEndpoints))
		if body.LocalEndpoints == 0 || !body.ServiceProxyHealthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// Indented with tabs and without a final newline, as kube-proxy
		// writes it.
		out, err := json.MarshalIndent(body, "", "\t")
		if err == nil {
			_, err = w.Write(out)
		}
		if err != nil {
			h.log.V(4).Info("Writing health check answer", "err", err.Error())
		}
	})
}

// requestFamily is the IP family of the address a request arrived on.
func requestFamily(r *http.Request) corev1.IPFamily {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok && a.IP.To4() == nil {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

func (h *healthServers) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, srv := range h.servers {
		_ = srv.Shutdown(context.Background())
		delete(h.servers, port)
	}
}
