// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// Why a sync failed: the step that failed, in the /healthz body and the
// svcnet_agent_sync_failures_total metric.
const (
	// ReasonNode: this node's Node could not be read.
	ReasonNode = "node"
	// ReasonRender: the Services and EndpointSlices to render could not be
	// read.
	ReasonRender = "render"
	// ReasonNodeAddresses: the node's addresses for --nodeport-addresses
	// could not be listed.
	ReasonNodeAddresses = "node-addresses"
	// ReasonList: a backend could not read the rules live on the node
	// before a full sync.
	ReasonList = "list"
	// ReasonApply: a backend's transaction was refused.
	ReasonApply = "apply"
)

// syncFailure is the last failed sync's step and error.
type syncFailure struct {
	reason string
	err    error
}

// Health is the agent's health as kube-proxy's health server judges it:
// by how long the oldest change not yet in the rules has waited, whatever
// kept it waiting (a failed step, or a sync still running), not by
// whether the last apply failed; and, as there, per IP family.
type Health struct {
	// Healthy is false once a change has waited the health timeout
	// (twice --sync-period) in any family.
	Healthy bool `json:"healthy"`
	// Ready is true once a sync has applied everything and the agent is
	// healthy.
	Ready bool `json:"ready"`
	// LastUpdated is kube-proxy's: the latest of the families'.
	LastUpdated time.Time `json:"lastUpdated"`
	CurrentTime time.Time `json:"currentTime"`
	// OldestQueuedChange is when the oldest change still waiting in any
	// family was queued; absent when none waits.
	OldestQueuedChange *time.Time `json:"oldestQueuedChange,omitempty"`
	// NodeEligible, in /healthz answers only, tells whether the node
	// should get load balancer traffic (NodeEligible); /healthz fails
	// when it is false.
	NodeEligible *bool `json:"nodeEligible,omitempty"`
	// Status is the health of each IP family's rules, as kube-proxy's
	// per-family proxiers report it: a family waits on the changes of its
	// own (a slice of its address type, a Service with a ClusterIP of
	// it) and on those its backend refused while the other's applied
	// them, and keeps its older lastUpdated meanwhile.
	Status map[corev1.IPFamily]FamilyHealth `json:"status,omitempty"`
	// Reason and Error say why the last sync failed (the Reason*
	// constants), while no sync has succeeded since.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// FamilyHealth is the health of one IP family's rules.
type FamilyHealth struct {
	// LastUpdated is when the family's backend last applied a sync, or
	// the agent's start before its first.
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// Health reports the agent's health now.
func (a *Agent) Health() Health {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock.Now()
	h := Health{Healthy: true, CurrentTime: now, Status: map[corev1.IPFamily]FamilyHealth{}}
	// A family waits on the changes of its own queued or taken by the
	// running sync, and on those its backend refused.
	oldest := earliest(a.queuedAt.earliest(), a.syncingQueuedAt.earliest())
	for _, f := range a.families() {
		since := earliest(a.queuedAt[f], a.syncingQueuedAt[f], a.familyBehind[f])
		// kube-proxy's rule: unhealthy once the wait reaches the timeout.
		healthy := since.IsZero() || now.Sub(since) < a.cfg.HealthTimeout
		h.Status[f] = FamilyHealth{LastUpdated: a.familyUpdated[f], Healthy: healthy}
		h.Healthy = h.Healthy && healthy
		oldest = earliest(oldest, since)
		if a.familyUpdated[f].After(h.LastUpdated) {
			h.LastUpdated = a.familyUpdated[f]
		}
	}
	if len(a.backends) == 0 {
		h.Healthy = oldest.IsZero() || now.Sub(oldest) < a.cfg.HealthTimeout
	}
	if !oldest.IsZero() {
		h.OldestQueuedChange = &oldest
	}
	if a.failure != nil {
		h.Reason, h.Error = a.failure.reason, a.failure.err.Error()
	}
	h.Ready = h.Healthy && !a.lastSuccess.IsZero()
	return h
}

// earliest is the earliest of times, the zero time meaning none.
func earliest(times ...time.Time) time.Time {
	var out time.Time
	for _, t := range times {
		if out.IsZero() || (!t.IsZero() && t.Before(out)) {
			out = t
		}
	}
	return out
}

// healthzServer serves the agent's /healthz and /livez (kube-proxy's, on
// its --healthz-bind-address) and /readyz, answering with the Health as
// JSON: /livez 200 while healthy (nothing has waited past the timeout),
// /healthz 200 while healthy and the node eligible for load balancer
// traffic, /readyz 200 once ready; else 503.
type healthzServer struct {
	addr  string
	agent *Agent
	log   logr.Logger
	// onBlocked: see retryingServer.
	onBlocked func(error)
}

func (s *healthzServer) handler() http.Handler {
	mux := http.NewServeMux()
	// kube-proxy counts the answers of these two, not /readyz's.
	answers := map[string]*prometheus.CounterVec{"/healthz": metricHealthz, "/livez": metricLivez}
	serve := func(check func(r *http.Request, h *Health) bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			h := s.agent.Health()
			ok := check(r, &h)
			if ok && h.Healthy {
				// kube-proxy's compatibility rule: a healthy answer's
				// lastUpdated is now, as when it meant the last sync loop.
				h.LastUpdated = h.CurrentTime
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			code := http.StatusOK
			if !ok {
				code = http.StatusServiceUnavailable
				w.WriteHeader(code)
			}
			if counter := answers[r.URL.Path]; counter != nil {
				counter.WithLabelValues(strconv.Itoa(code)).Inc()
			}
			if err := json.NewEncoder(w).Encode(h); err != nil {
				s.log.V(4).Info("Writing health answer", "err", err.Error())
			}
		}
	}
	mux.Handle("/healthz", serve(func(r *http.Request, h *Health) bool {
		eligible := s.agent.NodeEligible(r.Context())
		h.NodeEligible = &eligible
		return h.Healthy && eligible
	}))
	mux.Handle("/livez", serve(func(_ *http.Request, h *Health) bool { return h.Healthy }))
	mux.Handle("/readyz", serve(func(_ *http.Request, h *Health) bool { return h.Ready }))
	return mux
}

// Start implements manager.Runnable (see retryingServer).
func (s *healthzServer) Start(ctx context.Context) error {
	return (&retryingServer{what: "Health server", addr: s.addr, handler: s.handler(), log: s.log, onBlocked: s.onBlocked, onListen: func() {
		// kube-proxy, which holds the same address while it runs on
		// the node, has left it: its leftovers can go (handover.go).
		s.agent.healthListening.Store(true)
		s.agent.Trigger()
	}}).Start(ctx)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// agent serves its health.
func (s *healthzServer) NeedLeaderElection() bool { return false }
