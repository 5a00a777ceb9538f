// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// The hops of a report, in the order a packet meets them.
const (
	HopName          = "name"
	HopService       = "service"
	HopPods          = "pods"
	HopEndpointSlice = "endpointslices"
	HopNode          = "node"
	HopExternal      = "external"
	HopEvents        = "events"
)

// Report is what Analyze finds: a hop per step of the path, and the
// first that breaks.
type Report struct {
	Service string `json:"service"`
	From    string `json:"from"`
	Hops    []Hop  `json:"hops"`
	// Works is true when no hop breaks.
	Works bool `json:"works"`
	// Broken is the first problem on the path, nil when it works.
	Broken *Finding `json:"broken,omitempty"`
}

// Hop is one step of the path: what holds there, and what does not.
type Hop struct {
	Name     string    `json:"name"`
	Facts    []string  `json:"facts,omitempty"`
	Problems []Finding `json:"problems,omitempty"`
}

// Finding is a problem on the path and what to change.
type Finding struct {
	Hop     string `json:"hop"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
}

// hop collects one hop's facts and problems.
type hop struct{ Hop }

func newHop(name string) *hop { return &hop{Hop{Name: name}} }

func (h *hop) fact(format string, args ...any) {
	h.Facts = append(h.Facts, fmt.Sprintf(format, args...))
}

func (h *hop) problem(fix, format string, args ...any) {
	h.Problems = append(h.Problems, Finding{Hop: h.Name, Problem: fmt.Sprintf(format, args...), Fix: fix})
}

// Analyze follows the path from in.From to the Service's Pods. Pure.
func Analyze(in Inputs) Report {
	r := Report{Service: in.Key.String(), From: in.From.String()}
	svc := in.Service
	if svc == nil {
		h := newHop(HopService)
		h.problem("check the name and the namespace (-n); kubectl get services -A lists them",
			"Service %s does not exist", in.Key)
		return finish(r, h.Hop)
	}
	hops := []Hop{nameHop(in).Hop, serviceHop(in).Hop}
	if svc.Spec.Type != corev1.ServiceTypeExternalName {
		if len(svc.Spec.Selector) > 0 {
			hops = append(hops, podsHop(in).Hop)
		}
		hops = append(hops, slicesHop(in).Hop)
		if in.From.Node != "" && !in.From.External {
			hops = append(hops, nodeHop(in).Hop)
		}
		if in.From.External {
			hops = append(hops, externalHop(in).Hop)
		}
	}
	hops = append(hops, eventsHop(in).Hop)
	return finish(r, hops...)
}

func finish(r Report, hops ...Hop) Report {
	for _, h := range hops {
		if h.Name == HopName && len(h.Facts) == 0 && len(h.Problems) == 0 {
			continue // no name lookup on this path
		}
		r.Hops = append(r.Hops, h)
		if r.Broken == nil && len(h.Problems) > 0 {
			r.Broken = &h.Problems[0]
		}
	}
	r.Works = r.Broken == nil
	return r
}

// nameHop: what cluster DNS answers for the Service's name to a Pod.
func nameHop(in Inputs) *hop {
	h := newHop(HopName)
	if in.From.External || (in.From.Node != "" && in.From.Pod == nil) {
		return h // outside clients and a node's own programs do not ask cluster DNS
	}
	svc := in.Service
	name := fmt.Sprintf("%s.%s.svc", svc.Name, svc.Namespace)
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		h.fact("%s: CNAME %s", name, svc.Spec.ExternalName)
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		addrs := endpointAddresses(in.Slices, svc.Spec.PublishNotReadyAddresses)
		h.fact("%s: headless, A/AAAA records are the ready endpoints' addresses: %s", name, orNone(addrs))
	default:
		h.fact("%s: %s", name, records(svc.Spec.ClusterIPs))
	}
	for _, p := range svc.Spec.Ports {
		if p.Name != "" {
			h.fact("SRV _%s._%s.%s: port %d", p.Name, strings.ToLower(string(p.Protocol)), name, p.Port)
		}
	}
	switch {
	case !in.DNS.Found:
		h.problem("install cluster DNS (CoreDNS) as the Service kube-system/kube-dns, or reach the Service by address",
			"there is no Service %s: cluster DNS does not answer names", ClusterDNS)
	case in.DNS.Ready == 0:
		h.problem("see why the cluster DNS Pods are not Ready: kubectl -n kube-system get pods -l k8s-app=kube-dns",
			"cluster DNS (%s) has no ready endpoint: names do not resolve", ClusterDNS)
	default:
		h.fact("cluster DNS (%s) has %d ready endpoint(s)", ClusterDNS, in.DNS.Ready)
	}
	return h
}

func records(ips []string) string {
	var out []string
	for _, ip := range ips {
		a, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			out = append(out, ip)
		case a.Is4():
			out = append(out, "A "+ip)
		default:
			out = append(out, "AAAA "+ip)
		}
	}
	return orNone(out)
}

// serviceHop: the Service's own settings and addresses.
func serviceHop(in Inputs) *hop {
	h := newHop(HopService)
	svc := in.Service
	h.fact("type %s, %s", svc.Spec.Type, describePorts(svc))
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName == "" {
			h.problem("set spec.externalName", "ExternalName Service without an externalName")
		}
		return h
	}
	describeSpec(h, svc)
	describeClusterIPs(h, in)
	if in.From.External {
		if svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) == 0 {
			h.problem("make it type NodePort or LoadBalancer (or give it externalIPs routed to the nodes)",
				"a ClusterIP Service is not reachable from outside the cluster")
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		describeLoadBalancer(h, in)
	}
	return h
}

func describePorts(svc *corev1.Service) string {
	if len(svc.Spec.Ports) == 0 {
		return "no ports"
	}
	var out []string
	for _, p := range svc.Spec.Ports {
		s := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.Name != "" {
			s = p.Name + " " + s
		}
		s += " -> " + p.TargetPort.String()
		if p.NodePort != 0 {
			s += fmt.Sprintf(" (nodePort %d)", p.NodePort)
		}
		out = append(out, s)
	}
	return "ports " + strings.Join(out, ", ")
}

func describeSpec(h *hop, svc *corev1.Service) {
	if len(svc.Spec.Selector) > 0 {
		h.fact("selector %s", labels.SelectorFromSet(svc.Spec.Selector))
	} else {
		h.fact("no selector: its endpoints come from EndpointSlices someone else writes (or Endpoints, mirrored)")
	}
	var fams []string
	for _, f := range svc.Spec.IPFamilies {
		fams = append(fams, string(f))
	}
	h.fact("ipFamilies %s (%s)", orNone(fams), ptr.Deref(svc.Spec.IPFamilyPolicy, corev1.IPFamilyPolicySingleStack))
	var policies []string
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster {
		policies = append(policies, "internalTrafficPolicy "+string(*p))
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		policies = append(policies, "externalTrafficPolicy Local")
	}
	if td := svc.Spec.TrafficDistribution; td != nil {
		policies = append(policies, "trafficDistribution "+*td)
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		policies = append(policies, "sessionAffinity ClientIP")
	}
	if len(policies) > 0 {
		h.fact("%s", strings.Join(policies, ", "))
	}
	if len(svc.Spec.ExternalIPs) > 0 {
		h.fact("externalIPs %s", strings.Join(svc.Spec.ExternalIPs, ", "))
	}
}

func describeClusterIPs(h *hop, in Inputs) {
	svc := in.Service
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		h.fact("headless (clusterIP None): no virtual address; clients reach the Pods' own addresses, which the name resolves to")
		return
	}
	for _, ip := range svc.Spec.ClusterIPs {
		ipa, ok := in.IPAddresses[ip]
		switch {
		case !ok:
			h.fact("ClusterIP %s has no IPAddress object (kube-apiserver keeps one per allocated ClusterIP)", ip)
		case ipa.Spec.ParentRef == nil || ipa.Spec.ParentRef.Namespace != svc.Namespace || ipa.Spec.ParentRef.Name != svc.Name:
			h.fact("ClusterIP %s: its IPAddress names another parent (%v)", ip, ipa.Spec.ParentRef)
		default:
			h.fact("ClusterIP %s (IPAddress %s)", ip, ipa.Name)
		}
	}
}

// describeLoadBalancer: the Service's LoadBalancer address, and why it
// has none.
func describeLoadBalancer(h *hop, in Inputs) {
	svc := in.Service
	var ips []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, cmpOr(ing.IP, ing.Hostname))
	}
	class := ptr.Deref(svc.Spec.LoadBalancerClass, "")
	served := in.Serve.Serves(svc)
	if class != "" {
		h.fact("loadBalancerClass %s (%s)", class, map[bool]string{true: "svcnet's", false: "another implementation's"}[served])
	}
	if len(ips) > 0 {
		h.fact("LoadBalancer address %s", strings.Join(ips, ", "))
		if ranges := svc.Spec.LoadBalancerSourceRanges; len(ranges) > 0 {
			h.fact("loadBalancerSourceRanges %s", strings.Join(ranges, ", "))
		}
		return
	}
	if !served {
		h.problem("see the controller of class "+class+", or remove loadBalancerClass for svcnet to serve it",
			"no LoadBalancer address: its class %s is another implementation's, which has not given it one", class)
		return
	}
	why := "svcnet's loadbalancer controller has not given it one yet"
	if ev := lastWarning(in.Events); ev != nil {
		why = fmt.Sprintf("%s: %s", ev.Reason, ev.Message)
	}
	h.problem("give the pools free addresses that take this Service (kubectl get lbpool), or release one",
		"no LoadBalancer address (%s)", why)
}

// podsHop: the Pods the selector matches, their readiness and ports.
func podsHop(in Inputs) *hop {
	h := newHop(HopPods)
	svc := in.Service
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(in.Pods) == 0 {
		var seen []string
		for _, k := range slices.Sorted(maps.Keys(in.OtherLabels)) {
			for _, v := range in.OtherLabels[k] {
				seen = append(seen, k+"="+v)
			}
		}
		hint := ""
		if len(seen) > 0 {
			hint = " (Pods there carry " + strings.Join(seen, ", ") + ")"
		}
		h.problem("set the selector to the labels of the Pods that serve it, or label those Pods "+sel.String(),
			"selector %s matches no Pod in %s%s", sel, svc.Namespace, hint)
		return h
	}
	var ready, terminating []corev1.Pod
	perNode := map[string]int{}
	for _, p := range in.Pods {
		switch {
		case p.DeletionTimestamp != nil:
			terminating = append(terminating, p)
		case podReady(&p):
			ready = append(ready, p)
			perNode[cmpOr(p.Spec.NodeName, "no node")]++
		}
	}
	h.fact("%d Pod(s) match %s: %d Ready, %d terminating; Ready per node: %s", len(in.Pods), sel, len(ready), len(terminating), describeCounts(perNode))
	if len(ready) == 0 && !svc.Spec.PublishNotReadyAddresses {
		h.problem("make the Pods Ready: kubectl describe pod shows their probes and containers",
			"none of the %d Pod(s) is Ready: %s", len(in.Pods), notReadyReasons(in.Pods))
	}
	checkTargetPorts(h, svc, in.Pods)
	return h
}

// checkTargetPorts: every targetPort must be a port the Pods have, by
// name, or, when the Pods declare their ports, by number.
func checkTargetPorts(h *hop, svc *corev1.Service, pods []corev1.Pod) {
	for _, sp := range svc.Spec.Ports {
		tp := sp.TargetPort
		found, have := podsWithPort(pods, sp)
		switch {
		case tp.Type == intstr.String && found == 0:
			h.problem(fmt.Sprintf("set the port's targetPort to the name or number the Pods use, or name their container port %q", tp.StrVal),
				"targetPort %q of port %d matches no port of the %d Pod(s): they have %s", tp.StrVal, sp.Port, len(pods), orNone(have))
		case tp.Type == intstr.Int && found == 0 && len(have) > 0:
			h.problem("set the port's targetPort to the port the Pods listen on",
				"targetPort %d of port %d is no port the %d Pod(s) declare: they declare %s", targetNumber(sp), sp.Port, len(pods), strings.Join(have, ", "))
		case found > 0 && found < len(pods):
			h.fact("targetPort %s of port %d: on %d of %d Pods", tp.String(), sp.Port, found, len(pods))
		}
	}
}

// podsWithPort counts the Pods with a container port that sp's
// targetPort names (or numbers), and lists the ports of the protocol
// they declare.
func podsWithPort(pods []corev1.Pod, sp corev1.ServicePort) (found int, have []string) {
	tp := sp.TargetPort
	for _, p := range pods {
		ok := false
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Protocol != "" && cp.Protocol != sp.Protocol {
					continue
				}
				desc := strconv.Itoa(int(cp.ContainerPort))
				if cp.Name != "" {
					desc = fmt.Sprintf("%q (%d)", cp.Name, cp.ContainerPort)
				}
				if !slices.Contains(have, desc) {
					have = append(have, desc)
				}
				ok = ok || (tp.Type == intstr.String && cp.Name == tp.StrVal) || (tp.Type == intstr.Int && cp.ContainerPort == targetNumber(sp))
			}
		}
		if ok {
			found++
		}
	}
	return found, have
}

func targetNumber(sp corev1.ServicePort) int32 {
	if sp.TargetPort.IntVal == 0 {
		return sp.Port
	}
	return sp.TargetPort.IntVal
}

func notReadyReasons(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+" "+notReadyReason(&p))
		if len(out) == 3 {
			break
		}
	}
	return strings.Join(out, "; ")
}

// notReadyReason says why a Pod is not Ready, as its status tells.
func notReadyReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("(container %s waiting: %s)", cs.Name, w.Reason)
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("(container %s terminated: %s)", cs.Name, t.Reason)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("(%s %s)", cmpOr(c.Reason, "not Ready"), c.Message)
		}
	}
	if p.Spec.NodeName == "" {
		return "(not scheduled)"
	}
	return "(" + string(p.Status.Phase) + ")"
}

// slicesHop: the EndpointSlices, and whether they agree with the Pods.
func slicesHop(in Inputs) *hop {
	h := newHop(HopEndpointSlice)
	svc := in.Service
	var readyEPs, notReady int
	listed := map[string]bool{}
	for _, s := range in.Slices {
		for _, ep := range s.Endpoints {
			if ready(ep) {
				readyEPs++
				for _, a := range ep.Addresses {
					listed[a] = true
				}
			} else {
				notReady++
			}
		}
		h.fact("%s (%s, %s): %d endpoint(s)%s", s.Name, s.AddressType, s.Labels[discoveryv1.LabelManagedBy], len(s.Endpoints), hints(s))
	}
	if len(in.Slices) == 0 {
		if len(svc.Spec.Selector) == 0 {
			h.problem("write an EndpointSlice (label kubernetes.io/service-name="+svc.Name+") or an Endpoints object named "+svc.Name+" with the backends' addresses",
				"no EndpointSlice: a Service without a selector has endpoints only where someone writes them")
			return h
		}
		if len(readyPods(in.Pods)) > 0 {
			h.problem("check that an EndpointSlice controller runs: svcnet's manager (controller endpointslice) or kube-controller-manager's endpointslice-controller",
				"no EndpointSlice although %d Pod(s) are Ready: no EndpointSlice controller has published them", len(readyPods(in.Pods)))
		}
		return h
	}
	h.fact("%d ready endpoint(s), %d not ready", readyEPs, notReady)
	var missing []string
	for _, p := range readyPods(in.Pods) {
		if p.Status.PodIP != "" && !listed[p.Status.PodIP] {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		h.problem("check the EndpointSlice controller's log and its Events on the Service",
			"Ready Pod(s) %s are not ready endpoints of the slices: the EndpointSlice controller is behind", strings.Join(missing, ", "))
	}
	if readyEPs == 0 && len(svc.Spec.Selector) == 0 {
		h.problem("mark the endpoints ready, or add ready ones", "the slices hold no ready endpoint")
	}
	return h
}

func hints(s discoveryv1.EndpointSlice) string {
	zones := map[string]bool{}
	for _, ep := range s.Endpoints {
		if ep.Hints != nil {
			for _, z := range ep.Hints.ForZones {
				zones[z.Name] = true
			}
		}
	}
	if len(zones) == 0 {
		return ""
	}
	return ", hints for zones " + strings.Join(slices.Sorted(maps.Keys(zones)), ", ")
}

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

func ready(ep discoveryv1.Endpoint) bool { return ep.Conditions.Ready == nil || *ep.Conditions.Ready }

func localReady(sl []discoveryv1.EndpointSlice, node string) int {
	n := 0
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if ready(ep) && ep.NodeName != nil && *ep.NodeName == node {
				n++
			}
		}
	}
	return n
}

func endpointAddresses(sl []discoveryv1.EndpointSlice, notReadyToo bool) []string {
	var out []string
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			if ready(ep) || notReadyToo {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readyPods(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podReady(&p) {
			out = append(out, p)
		}
	}
	return out
}

func describeCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
