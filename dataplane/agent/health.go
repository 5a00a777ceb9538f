package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/go-logr/logr"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// healthEntry is what one health check node port reports.
type healthEntry struct {
	namespace, name string
	local           int
}

// healthServers serves the healthCheckNodePort of every
// externalTrafficPolicy: Local LoadBalancer Service, the way kube-proxy
// does: 200 with the local endpoint count when this node has one, else 503,
// so that load balancers send traffic only to nodes that can serve it.
type healthServers struct {
	netns string
	log   logr.Logger

	mu      sync.Mutex
	entries map[int32]healthEntry
	servers map[int32]*http.Server
}

func newHealthServers(ns string, log logr.Logger) *healthServers {
	return &healthServers{netns: ns, log: log, entries: map[int32]healthEntry{}, servers: map[int32]*http.Server{}}
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
	for port := range entries {
		if _, ok := h.servers[port]; ok {
			continue
		}
		l, err := netns.Listen(h.netns, net.JoinHostPort("", strconv.Itoa(int(port))))
		if err != nil {
			h.log.Error(err, "Cannot serve health check node port", "port", port)
			continue
		}
		srv := &http.Server{Handler: h.handler(port)}
		h.servers[port] = srv
		go func() { _ = srv.Serve(l) }()
	}
}

func (h *healthServers) handler(port int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.mu.Lock()
		e, ok := h.entries[port]
		h.mu.Unlock()
		if !ok {
			http.NotFound(w, nil)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(e.local))
		if e.local == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		body := map[string]any{
			"service":             map[string]string{"namespace": e.namespace, "name": e.name},
			"localEndpoints":      e.local,
			"serviceProxyHealthy": true,
		}
		if err := json.NewEncoder(w).Encode(body); err != nil {
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
