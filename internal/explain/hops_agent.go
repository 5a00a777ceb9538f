// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/internal/nodeview"
)

// AgentReader reads what a node's agent programmed for a Service: a
// nodeview.Client.
type AgentReader interface {
	Address(host string) string
	Service(ctx context.Context, host string, key types.NamespacedName) (*nodeview.Service, error)
}

// AgentRead is the agent of the client's node, as the report read it:
// its View, or why there is none.
type AgentRead struct {
	Node    string
	Address string
	View    *nodeview.Service
	// Unseen: the agent could not be asked (it did not admit the caller,
	// its certificate is not trusted, or its node cannot be reached from
	// here); the hop is not judged. Otherwise, without a View, the agent
	// is down or its sync loop stuck: the hop breaks.
	Unseen bool
	// Untrusted: unseen because its serving certificate failed the
	// kubeconfig's CA.
	Untrusted bool
	// Stuck: the agent answered that its sync loop does not.
	Stuck bool
	Err   string
}

// ReadAgent reads the agent of the client's node, when there is one.
func (in *Inputs) ReadAgent(ctx context.Context, r AgentReader) {
	if in.Service == nil || in.From.Node == "" || in.Service.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	read := &AgentRead{Node: in.From.Node}
	in.Agent = read
	host := nodeAddress(in.Nodes, in.From.Node)
	if host == "" {
		read.Unseen, read.Err = true, "the Node has no address"
		return
	}
	read.Address = r.Address(host)
	v, err := r.Service(ctx, host, in.Key)
	if err == nil {
		read.View = v
		return
	}
	read.Err = err.Error()
	var status *nodeview.StatusError
	var untrusted *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &status):
		// 401, 403: not admitted; 503: its loop does not answer.
		read.Unseen = status.Code == http.StatusUnauthorized || status.Code == http.StatusForbidden
		read.Stuck = status.Code == http.StatusServiceUnavailable
	case errors.As(err, &untrusted):
		read.Unseen, read.Untrusted = true, true
	case errors.Is(err, syscall.ECONNREFUSED):
		// The node answered: nothing listens there.
	case errors.As(err, &op) && op.Op == "dial":
		// No route, or no answer at all: the node's network is not
		// reachable from here.
		read.Unseen = true
	default:
		// Connected, and then no answer: a hung agent.
	}
}

// nodeAddress is where the API server would reach the node: its
// InternalIP, else its ExternalIP, else its Hostname.
func nodeAddress(nodes []corev1.Node, name string) string {
	for _, n := range nodes {
		if n.Name != name {
			continue
		}
		for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName} {
			for _, a := range n.Status.Addresses {
				if a.Type == t && a.Address != "" {
					return a.Address
				}
			}
		}
	}
	return ""
}

// agentFacts: what the node's agent says its rules hold for the
// Service, and where they break the path. external looks at the ports'
// nodePort and load balancer rules, else at the ClusterIP's.
func agentFacts(h *hop, in Inputs, external bool) {
	read := in.Agent
	switch {
	case read == nil:
		return
	case read.Untrusted:
		h.fact("not seen: the agent on %s (%s) serves a certificate the kubeconfig's CA did not sign (%s); give the agents certificates of the cluster's CA (--api-tls-cert-file), or pass --agent-insecure-skip-tls-verify",
			read.Node, read.Address, read.Err)
		return
	case read.Unseen:
		h.fact("not seen: the agent on %s (%s) could not be read from here: %s. Reading it needs the node's network, and get on nodes/proxy of %s as kubectl get --raw /api/v1/nodes/%s/proxy/ does",
			read.Node, read.Address, read.Err, read.Node, read.Node)
		return
	case read.Stuck:
		h.problem(fmt.Sprintf("read the svcnet agent's log on %s; restart it (delete its Pod) if its loop stays stuck", read.Node),
			"the agent on %s answers, but its sync loop does not: %s", read.Node, read.Err)
		return
	case read.View == nil:
		h.problem(fmt.Sprintf("check the svcnet agent on %s (kubectl -n svcnet-system get pods -o wide --field-selector spec.nodeName=%s, and its log); where kube-proxy runs the node instead, explain with --agent-port=0", read.Node, read.Node),
			"the agent on %s does not answer at %s (%s): the node's rules cannot be read", read.Node, read.Address, read.Err)
		return
	}
	v := read.View
	if v.Standby {
		h.fact("%s is labelled for kube-proxy: the svcnet agent writes no rules there", v.Node)
		return
	}
	if v.Sync.Error != "" && v.Sync.Healthy {
		h.problem(fmt.Sprintf("read the svcnet agent's log on %s; it retries", v.Node),
			"%s's last sync failed and none has succeeded since (%s): changes since %s are not in its rules", v.Node, v.Sync.Error, at(v.Sync.LastSynced, v.Sync.Now))
		return
	}
	if !v.Sync.Healthy {
		h.problem(fmt.Sprintf("read the svcnet agent's log on %s%s", v.Node, lastError(v.Sync)),
			"%s's rules are stale: a change has waited since %s, and the last sync was %s", v.Node, ago(v.Sync.OldestQueuedChange, v.Sync.Now), at(v.Sync.LastSynced, v.Sync.Now))
		return
	}
	h.fact("%s's agent (%s mode) last synced %s", v.Node, v.Mode, at(v.Sync.LastSynced, v.Sync.Now))
	if !v.UpToDate {
		h.fact("a change to the Service or its slices waits for %s's next sync", v.Node)
	}
	for _, p := range v.Ports {
		portFacts(h, in, v.Node, p, external)
	}
}

func portFacts(h *hop, in Inputs, node string, p nodeview.Port, external bool) {
	eps, dest := p.Internal, fmt.Sprintf("%s:%d/%s", p.ClusterIP, p.Port, p.Protocol)
	if external {
		if p.NodePort == 0 && len(p.LoadBalancerIPs) == 0 && len(p.ExternalIPs) == 0 {
			return
		}
		eps, dest = p.External, fmt.Sprintf("the external addresses of port %d/%s", p.Port, p.Protocol)
		if p.NodePort != 0 {
			dest = fmt.Sprintf("nodePort %d/%s", p.NodePort, p.Protocol)
		}
	}
	if p.ClusterIP == "" && !external {
		return
	}
	if len(eps) > 0 {
		h.fact("%s's rules send %s (%s) to %s", node, dest, p.Family, endpointList(eps))
		return
	}
	ready := len(endpointAddresses(in.Slices, false))
	switch {
	case !p.HasEndpoints && ready > 0:
		h.problem(fmt.Sprintf("read the svcnet agent's log on %s: its cache of the EndpointSlices is behind the API server", node),
			"%s's rules reject %s (%s) as if no endpoint served it, while the slices list %d ready endpoint(s)", node, dest, p.Family, ready)
	case !p.HasEndpoints:
		// The slices hop names why no endpoint serves.
		h.fact("%s's rules reject %s (%s): no endpoint serves it", node, dest, p.Family)
	default:
		h.problem(fmt.Sprintf("run a Pod of the Service on %s, or set the policy to Cluster", node),
			"%s's rules drop %s (%s): the policy is Local and none of the %d ready endpoint(s) is on %s", node, dest, p.Family, ready, node)
	}
}

func endpointList(eps []nodeview.Endpoint) string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		s := e.Address
		if !e.Ready {
			s += " (terminating)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

func lastError(s nodeview.Sync) string {
	if s.Error == "" {
		return ""
	}
	return "; its last sync failed: " + s.Error
}

func ago(t *time.Time, now time.Time) string {
	if t == nil {
		return "now"
	}
	return at(*t, now)
}

func at(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s ago", now.Sub(t).Round(time.Second))
}
