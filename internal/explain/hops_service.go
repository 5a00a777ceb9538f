// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

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
		dnsFacts(h, in)
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
