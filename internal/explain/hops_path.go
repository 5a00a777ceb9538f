// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// nodeHop: what the client's node does with a connection to the
// ClusterIP under the Service's internal policy.
func nodeHop(in Inputs) *hop {
	h := newHop(HopNode)
	svc := in.Service
	node := in.From.Node
	local := localReady(in.Slices, node)
	h.fact("%d ready endpoint(s) on %s", local, node)
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return h
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal && local == 0 {
		h.problem(fmt.Sprintf("run a Pod of the Service on %s, or set internalTrafficPolicy Cluster", node),
			"internalTrafficPolicy Local and no ready endpoint on %s: connections from it to the ClusterIP are dropped", node)
	}
	agentFacts(h, in, false)
	return h
}

// externalHop: how a client outside reaches the Service.
func externalHop(in Inputs) *hop {
	h := newHop(HopExternal)
	svc := in.Service
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return h
	}
	if node := in.From.Node; node != "" && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && localReady(in.Slices, node) == 0 {
		h.problem(fmt.Sprintf("send outside clients to nodes with a ready endpoint (its health check nodePort %d answers 200 there), or set externalTrafficPolicy Cluster", svc.Spec.HealthCheckNodePort),
			"externalTrafficPolicy Local and no ready endpoint on %s: its nodePort drops outside clients' connections", node)
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		var nodes []string
		for _, n := range in.Nodes {
			if localReady(in.Slices, n.Name) > 0 {
				nodes = append(nodes, n.Name)
			}
		}
		if len(nodes) == 0 {
			h.problem("run Ready Pods of the Service, or set externalTrafficPolicy Cluster",
				"externalTrafficPolicy Local and no node has a ready endpoint: every node drops outside clients' connections")
		} else {
			h.fact("externalTrafficPolicy Local: only %s answer (health check nodePort %d)", strings.Join(nodes, ", "), svc.Spec.HealthCheckNodePort)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 {
		checkSourceRanges(h, svc, in.From.ClientIP)
		checkAnnounced(h, in)
	}
	agentFacts(h, in, true)
	return h
}

func checkSourceRanges(h *hop, svc *corev1.Service, client netip.Addr) {
	ranges := svc.Spec.LoadBalancerSourceRanges
	if len(ranges) == 0 || !client.IsValid() {
		return
	}
	for _, r := range ranges {
		if p, err := netip.ParsePrefix(strings.TrimSpace(r)); err == nil && p.Contains(client) {
			h.fact("the client %s is in loadBalancerSourceRanges %s", client, r)
			return
		}
	}
	h.problem(fmt.Sprintf("add the client's range (e.g. %s/32) to loadBalancerSourceRanges", client),
		"loadBalancerSourceRanges %s shut out the client %s", strings.Join(ranges, ", "), client)
}

// checkAnnounced: which node makes the network send the address to the
// cluster.
func checkAnnounced(h *hop, in Inputs) {
	svc := in.Service
	if c := apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced); c != nil {
		if c.Status == "True" {
			h.fact("announced: %s", c.Message)
			return
		}
		h.problem("let the LoadBalancerAnnouncement select nodes that may announce it (with a ready endpoint under externalTrafficPolicy Local)",
			"no node announces it: %s", c.Message)
		return
	}
	var ptrs []*svcnetv1alpha1.LoadBalancerIPPool
	for i := range in.Pools {
		ptrs = append(ptrs, &in.Pools[i])
	}
	pools := announcementpolicy.Pools(ptrs)
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		addr, err := netip.ParseAddr(ing.IP)
		if err != nil {
			continue
		}
		covering := ""
		for i := range in.Announcements {
			a := &in.Announcements[i]
			if !a.Accepted() {
				continue
			}
			comp, err := announcementpolicy.Compile(a)
			if err == nil && comp.Covers(svc, addr, pools) {
				covering = a.Name
				break
			}
		}
		if covering != "" {
			h.fact("%s is announced by LoadBalancerAnnouncement %s", addr, covering)
			continue
		}
		if !slices.ContainsFunc(pools, func(p announcementpolicy.Pool) bool { return p.Contains(addr) }) {
			h.fact("%s is in no LoadBalancerIPPool: whatever gave it makes the network send it to the nodes", addr)
			continue
		}
		h.problem("create a LoadBalancerAnnouncement whose poolSelector and serviceSelector take it (or route the address to the nodes yourself)",
			"no LoadBalancerAnnouncement covers %s (%s): no node makes the network send it to the cluster", addr, poolsOf(pools, addr))
	}
}

func poolsOf(pools []announcementpolicy.Pool, addr netip.Addr) string {
	var names []string
	for _, p := range pools {
		if p.Contains(addr) {
			names = append(names, "pool "+p.Pool.Name)
		}
	}
	if len(names) == 0 {
		return "in no pool"
	}
	return strings.Join(names, ", ")
}

// eventsHop: the Service's recent Warning Events.
func eventsHop(in Inputs) *hop {
	h := newHop(HopEvents)
	var warnings []corev1.Event
	for _, ev := range in.Events {
		if ev.Type == corev1.EventTypeWarning {
			warnings = append(warnings, ev)
		}
	}
	if len(warnings) > 5 {
		warnings = warnings[len(warnings)-5:]
	}
	for _, ev := range warnings {
		h.fact("Warning %s: %s", ev.Reason, ev.Message)
	}
	if len(warnings) == 0 {
		h.fact("no Warning Event on the Service")
	}
	return h
}

func lastWarning(evs []corev1.Event) *corev1.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == corev1.EventTypeWarning {
			return &evs[i]
		}
	}
	return nil
}
