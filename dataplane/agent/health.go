// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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
	// the Service has rules in it, with 0 when no local endpoint is ready;
	// the port is served in the families present and only in those.
	local map[corev1.IPFamily]int
}

// healthListener is one socket of a health check node port: kube-proxy
// runs one health check server per IP family, each listening in its own
// family only, on every address of the family or on each of the node's
// --nodeport-addresses of the family.
type healthListener struct {
	port   int32
	family corev1.IPFamily
	// addr is the address listened on; invalid (the zero Addr) for every
	// address of the family.
	addr netip.Addr
}

// network and address are the arguments of net.Listen for l: "tcp4" or
// "tcp6", so that an IPv6 socket does not take IPv4 connections too.
func (l healthListener) network() string {
	if l.family == corev1.IPv6Protocol {
		return "tcp6"
	}
	return "tcp4"
}

func (l healthListener) address() string {
	host := ""
	switch {
	case l.addr.IsValid():
		host = l.addr.String()
	case l.family == corev1.IPv6Protocol:
		host = "::"
	default:
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(l.port)))
}

// healthListeners are the sockets that serve entries: for each port, one
// per family the Service has rules in, on every address of the family
// when addrs does not hold the family (no --nodeport-addresses of the
// family), else one per address it lists, none when it lists none, as
// kube-proxy's. The families absent from an entry have no socket, so a
// probe over them is refused, as kube-proxy's.
func healthListeners(entries map[int32]healthEntry, addrs map[corev1.IPFamily][]netip.Addr) map[healthListener]bool {
	out := map[healthListener]bool{}
	for port, e := range entries {
		for f := range e.local {
			ips, restricted := addrs[f]
			if !restricted {
				out[healthListener{port: port, family: f}] = true
				continue
			}
			for _, ip := range ips {
				out[healthListener{port: port, family: f, addr: ip}] = true
			}
		}
	}
	return out
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
	servers map[healthListener]*http.Server
	// failed is each port's last listen error already reported, so that a
	// port that stays taken is reported once, not at every sync.
	failed map[int32]string
}

// EventFailedHealthcheck is kube-proxy's reason for a health check node
// port that cannot be listened on.
const EventFailedHealthcheck = "FailedToStartServiceHealthcheck"

func newHealthServers(ns, node string, log logr.Logger, proxyHealthy func() bool) *healthServers {
	return &healthServers{netns: ns, node: node, log: log, proxyHealthy: proxyHealthy,
		entries: map[int32]healthEntry{}, servers: map[healthListener]*http.Server{}, failed: map[int32]string{}}
}

// update opens the sockets that new ports and families need, closes the
// ones no longer needed, and makes every server answer with the new
// counts. addrs are the node's --nodeport-addresses by family, for the
// families it restricts (healthListeners). refused are the families
// whose backend refused the sync: their ports and counts stay as the
// last applied sync left them (keepRefused).
func (h *healthServers) update(entries map[int32]healthEntry, addrs map[corev1.IPFamily][]netip.Addr, refused []corev1.IPFamily) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries = keepRefused(h.entries, entries, refused)
	h.entries = entries
	want := healthListeners(entries, addrs)
	for l, srv := range h.servers {
		if !want[l] {
			_ = srv.Close()
			delete(h.servers, l)
		}
	}
	for port := range h.failed {
		if _, ok := entries[port]; !ok {
			delete(h.failed, port)
		}
	}
	failed := map[int32]bool{}
	for _, l := range slices.SortedFunc(maps.Keys(want), compareHealthListeners) {
		if _, ok := h.servers[l]; ok {
			continue
		}
		var sock net.Listener
		err := netns.Do(h.netns, func() error {
			var err error
			sock, err = net.Listen(l.network(), l.address())
			return err
		})
		if err != nil {
			failed[l.port] = true
			h.reportListenFailure(l.port, entries[l.port], err)
			continue
		}
		srv := &http.Server{Handler: h.handler(l.port, l.family), ReadHeaderTimeout: 10 * time.Second}
		h.servers[l] = srv
		go func() { _ = srv.Serve(sock) }()
	}
	for port := range entries {
		if !failed[port] {
			delete(h.failed, port)
		}
	}
}

// keepRefused is what the health check node ports serve after a sync
// whose backends of the refused families failed: the rendered ports and
// counts of the other families, and the applied ones of the refused
// families, as kube-proxy's proxier of a family whose sync failed does
// not update its health check server (iptables/proxier.go returns
// before SyncServices and SyncEndpoints). A port's counts then agree
// with the rules that serve it: a count that went from 0 to 1 does not
// draw load balancer traffic to rules that still drop it.
func keepRefused(applied, rendered map[int32]healthEntry, refused []corev1.IPFamily) map[int32]healthEntry {
	if len(refused) == 0 {
		return rendered
	}
	out := map[int32]healthEntry{}
	put := func(port int32, e healthEntry, f corev1.IPFamily, n int) {
		cur, ok := out[port]
		if !ok {
			cur = healthEntry{namespace: e.namespace, name: e.name, local: map[corev1.IPFamily]int{}}
		}
		cur.local[f] = n
		out[port] = cur
	}
	for port, e := range rendered {
		for f, n := range e.local {
			if !slices.Contains(refused, f) {
				put(port, e, f, n)
			}
		}
	}
	for port, e := range applied {
		for f, n := range e.local {
			if slices.Contains(refused, f) {
				put(port, e, f, n)
			}
		}
	}
	return out
}

// compareHealthListeners orders sockets by port, family, address.
func compareHealthListeners(a, b healthListener) int {
	return cmp.Or(cmp.Compare(a.port, b.port), strings.Compare(string(a.family), string(b.family)), a.addr.Compare(b.addr))
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

// handler answers on the sockets of one port in one family, with that
// family's count, as kube-proxy's server of that family.
func (h *healthServers) handler(port int32, family corev1.IPFamily) http.Handler {
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
		body.LocalEndpoints = e.local[family]
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

func (h *healthServers) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for port, srv := range h.servers {
		_ = srv.Shutdown(context.Background())
		delete(h.servers, port)
	}
}
