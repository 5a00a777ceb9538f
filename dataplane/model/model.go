// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package model turns Services and EndpointSlices into what one node's
// proxy must implement: a list of service ports, each with the endpoints it
// may send traffic to, already filtered the way kube-proxy filters them
// (readiness, terminating fallback, traffic policies, topology hints). It
// is pure: the dataplane renderers (dataplane/iptables) take a Model and
// know nothing of the Kubernetes API.
package model

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// LabelServiceProxyName is the Service label that hands a Service to a
// specific proxy; proxies with another name ignore it.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Model is the desired state of one node for one IP family.
type Model struct {
	// Family is the IP family this model is for.
	Family corev1.IPFamily
	// Ports are the service ports to implement, sorted by Name.
	Ports []*ServicePort
}

// ServicePort is one port of one Service, as kube-proxy sees it.
type ServicePort struct {
	// Name is "namespace/name:port" (":port" only for a named port), the
	// string kube-proxy hashes into chain names.
	Name      string
	Namespace string
	Service   string
	Protocol  corev1.Protocol
	ClusterIP netip.Addr
	Port      int32
	NodePort  int32
	// ExternalIPs and LoadBalancerIPs of this family.
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSources are the loadBalancerSourceRanges of this
	// family, read as kube-proxy reads them: padding trimmed, legacy forms
	// (leading zeros, host bits) accepted, an unparseable range ignored,
	// and none at all when one is 0.0.0.0/0 or ::/0 (allow any).
	LoadBalancerSources []netip.Prefix
	// AllowFromNode tells whether the node's own IP of this family is in
	// LoadBalancerSources: traffic the node sends to its own load balancer
	// IP (which leaves with that IP as source) is then let through too,
	// kube-proxy's allowFromNode.
	AllowFromNode bool
	// AffinitySeconds is the ClientIP session affinity timeout; 0 = none.
	AffinitySeconds     int32
	ExternalPolicyLocal bool
	InternalPolicyLocal bool
	HealthCheckNodePort int32

	// ClusterEndpoints serve traffic under the Cluster policy (after
	// topology filtering and terminating fallback).
	ClusterEndpoints []Endpoint
	// LocalEndpoints serve traffic under a Local policy: this node's.
	LocalEndpoints []Endpoint
	// HasEndpoints tells whether the port has any usable endpoint at all,
	// which decides between REJECT (none anywhere) and DROP (none local).
	HasEndpoints bool
	// ServingEndpoints are every endpoint of the port that serves (ready,
	// or terminating and still serving), on any node, before policy and
	// topology: the flows to them are kept when conntrack is cleaned, as
	// kube-proxy keeps them, so that a change of policy or a rollout
	// treats UDP flows as it treats TCP connections.
	ServingEndpoints []Endpoint
}

// ExternallyAccessible tells whether traffic can arrive from outside the
// cluster (NodePort, externalIPs, LoadBalancer IPs).
func (p *ServicePort) ExternallyAccessible() bool {
	return p.NodePort != 0 || len(p.ExternalIPs) > 0 || len(p.LoadBalancerIPs) > 0
}

// InternalEndpoints are the endpoints cluster-IP traffic goes to.
func (p *ServicePort) InternalEndpoints() []Endpoint {
	if p.InternalPolicyLocal {
		return p.LocalEndpoints
	}
	return p.ClusterEndpoints
}

// ExternalEndpoints are the endpoints external traffic goes to. With the
// Local policy, traffic from this node itself may still use any endpoint.
func (p *ServicePort) ExternalEndpoints() []Endpoint {
	if p.ExternalPolicyLocal {
		return p.LocalEndpoints
	}
	return p.ClusterEndpoints
}

// UsesLocalChain tells whether a KUBE-SVL chain is needed.
func (p *ServicePort) UsesLocalChain() bool {
	return p.InternalPolicyLocal || (p.ExternalPolicyLocal && p.ExternallyAccessible())
}

// UsesClusterChain tells whether a KUBE-SVC chain is needed.
func (p *ServicePort) UsesClusterChain() bool {
	// Cluster-IP traffic under the Cluster policy uses it, and so does all
	// external traffic: under the Local policy, traffic from this node and
	// its Pods still goes to any endpoint.
	return !p.InternalPolicyLocal || p.ExternallyAccessible()
}

// Endpoint is one backend of a service port.
type Endpoint struct {
	IP   netip.Addr
	Port int32
	// Local tells whether the endpoint runs on this node.
	Local bool
	// Ready is the endpoint's ready condition: false for a terminating
	// endpoint that is used only because no ready one exists. The health
	// check node port counts ready local endpoints alone.
	Ready bool
}

// String is "ip:port", the text kube-proxy hashes into KUBE-SEP names.
func (e Endpoint) String() string {
	return netip.AddrPortFrom(e.IP, uint16(e.Port)).String()
}

// Node is what the model needs to know of the node it is for.
type Node struct {
	Name string
	Zone string
	// IPs are the node's primary address of each family, as kube-proxy
	// chooses them (the first InternalIP of the family, else the first
	// ExternalIP); a family without one is taken as its loopback address,
	// as kube-proxy does.
	IPs []netip.Addr
}

// IP is the node's primary address of family, or the loopback address of
// the family when it has none.
func (n Node) IP(family corev1.IPFamily) netip.Addr {
	for _, ip := range n.IPs {
		if ipfamily.Of(ip) == family {
			return ip
		}
	}
	if family == corev1.IPv6Protocol {
		return netip.IPv6Loopback()
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// Options are the proxy's own settings that change the model.
type Options struct {
	// ProxyName: set, only the Services whose
	// service.kubernetes.io/service-proxy-name label equals it are handled
	// (the split of a migration: kube-proxy keeps every unlabelled one);
	// empty, only the Services without the label, as kube-proxy.
	ProxyName string
}

// Build computes the model of one node and family: the ports of every
// Service, in the order of the Services' namespace and name and then of
// the ports' names; slicesByService holds each Service's EndpointSlices.
func Build(family corev1.IPFamily, node Node, services []*corev1.Service, slicesByService map[types.NamespacedName][]*discoveryv1.EndpointSlice, opts Options) *Model {
	sorted := slices.Clone(services)
	slices.SortFunc(sorted, func(a, b *corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	m := &Model{Family: family}
	for _, svc := range sorted {
		m.Ports = append(m.Ports, BuildService(family, node, svc, slicesByService[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}], opts)...)
	}
	return m
}

// BuildService computes the ports of one Service for one node and family,
// sorted by name: nil when this proxy does not handle the Service or it has
// no cluster IP of the family.
func BuildService(family corev1.IPFamily, node Node, svc *corev1.Service, svcSlices []*discoveryv1.EndpointSlice, opts Options) []*ServicePort {
	if !handled(svc, opts) {
		return nil
	}
	clusterIP, ok := clusterIPOf(svc, family)
	if !ok {
		return nil
	}
	key := svc.Namespace + "/" + svc.Name
	var ports []*ServicePort
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		p := &ServicePort{
			Name:                key + portSuffix(sp.Name),
			Namespace:           svc.Namespace,
			Service:             svc.Name,
			Protocol:            cmp.Or(sp.Protocol, corev1.ProtocolTCP),
			ClusterIP:           clusterIP,
			Port:                sp.Port,
			ExternalPolicyLocal: svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && externallyTyped(svc),
			InternalPolicyLocal: svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal,
		}
		if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			p.NodePort = sp.NodePort
		}
		if p.ExternalPolicyLocal && svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			p.HealthCheckNodePort = svc.Spec.HealthCheckNodePort
		}
		p.ExternalIPs = addrsOf(svc.Spec.ExternalIPs, family)
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			var ips []string
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP {
					ips = append(ips, ing.IP)
				}
			}
			p.LoadBalancerIPs = addrsOf(ips, family)
			p.LoadBalancerSources = SourceRanges(svc.Spec.LoadBalancerSourceRanges, family)
			nodeIP := node.IP(family)
			p.AllowFromNode = slices.ContainsFunc(p.LoadBalancerSources, func(r netip.Prefix) bool { return r.Contains(nodeIP) })
		}
		if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
			p.AffinitySeconds = corev1.DefaultClientIPServiceAffinitySeconds
			if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
				p.AffinitySeconds = *c.ClientIP.TimeoutSeconds
			}
		}
		fillEndpoints(p, sp, svcSlices, family, node)
		ports = append(ports, p)
	}
	slices.SortFunc(ports, func(a, b *ServicePort) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Protocol, b.Protocol))
	})
	return ports
}

// SourceRanges reads loadBalancerSourceRanges as kube-proxy does: each
// range trimmed of the padding API validation lets through, parsed
// leniently (leading zeros and host bits, which the API accepts in
// objects written before strict validation), masked; ranges of another
// family and those that do not parse (which the API never accepts) are
// left out. A range of length 0 (0.0.0.0/0, ::/0) allows every source,
// which is no ranges at all.
func SourceRanges(ranges []string, family corev1.IPFamily) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range ranges {
		pr, ok := parsePrefixSloppy(strings.TrimSpace(r))
		if !ok || ipfamily.OfPrefix(pr) != family {
			continue
		}
		if pr.Bits() == 0 {
			return nil
		}
		out = append(out, pr)
	}
	return out
}

// InvalidSourceRanges lists the loadBalancerSourceRanges SourceRanges
// leaves out because they do not parse, for the agent to report.
func InvalidSourceRanges(ranges []string) []string {
	var out []string
	for _, r := range ranges {
		if t := strings.TrimSpace(r); t != "" {
			if _, ok := parsePrefixSloppy(t); !ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// parsePrefixSloppy parses a CIDR as kube-proxy does (netutils'
// ParseCIDRSloppy: IPv4 octets with leading zeros are decimal), masked.
func parsePrefixSloppy(s string) (netip.Prefix, bool) {
	_, ipn, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(ipn.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipn.Mask.Size()
	return netip.PrefixFrom(addr, ones).Masked(), true
}

func handled(svc *corev1.Service, opts Options) bool {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false
	}
	name, labelled := svc.Labels[LabelServiceProxyName]
	if opts.ProxyName == "" {
		return !labelled
	}
	return labelled && name == opts.ProxyName
}

func externallyTyped(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Spec.ExternalIPs) > 0
}

func clusterIPOf(svc *corev1.Service, family corev1.IPFamily) (netip.Addr, bool) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err == nil && ipfamily.Of(a) == family {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func addrsOf(ss []string, family corev1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		a, err := netip.ParseAddr(s)
		if err == nil && ipfamily.Of(a) == family {
			out = append(out, a)
		}
	}
	return out
}

func portSuffix(name string) string {
	if name == "" {
		return ""
	}
	return ":" + name
}

// candidate is an endpoint before filtering.
type candidate struct {
	Endpoint
	ready, serving, terminating bool
	zoneHints, nodeHints        []string
}

// fillEndpoints selects the endpoints of one service port as kube-proxy
// does: ready ones; if there are none, serving-and-terminating ones; with
// topology hints applied when every ready endpoint carries one and some
// fit this node.
func fillEndpoints(p *ServicePort, sp *corev1.ServicePort, svcSlices []*discoveryv1.EndpointSlice, family corev1.IPFamily, node Node) {
	all := candidatesOf(p, sp, svcSlices, family, node)
	p.HasEndpoints = len(usable(all, func(candidate) bool { return true })) > 0
	for _, c := range all {
		if c.serving {
			p.ServingEndpoints = append(p.ServingEndpoints, c.Endpoint)
		}
	}
	p.LocalEndpoints = usable(all, func(c candidate) bool { return c.Local })
	p.ClusterEndpoints = usable(all, topologyFilter(all, node))
}

// candidatesOf reads the endpoints of one service port from the slices of
// its family, once each, sorted.
func candidatesOf(p *ServicePort, sp *corev1.ServicePort, svcSlices []*discoveryv1.EndpointSlice, family corev1.IPFamily, node Node) []candidate {
	seen := map[string]bool{}
	var all []candidate
	for _, s := range svcSlices {
		if string(s.AddressType) != string(family) {
			continue
		}
		port := slicePort(s, sp.Name, p.Protocol)
		if port == nil {
			continue
		}
		for _, ep := range s.Endpoints {
			c, ok := candidateOf(ep, *port, node)
			if !ok || seen[c.String()] {
				continue // unusable, or the same endpoint in two slices during a move
			}
			seen[c.String()] = true
			all = append(all, c)
		}
	}
	slices.SortFunc(all, func(a, b candidate) int { return cmp.Compare(a.String(), b.String()) })
	return all
}

// slicePort is the slice's port of that name and protocol, if it has one
// with a number.
func slicePort(s *discoveryv1.EndpointSlice, name string, proto corev1.Protocol) *int32 {
	for i := range s.Ports {
		sp := &s.Ports[i]
		if ptrStr(sp.Name) == name && cmp.Or(ptrProto(sp.Protocol), corev1.ProtocolTCP) == proto {
			return sp.Port
		}
	}
	return nil
}

// candidateOf reads one endpoint; ok is false when it has no usable
// address.
func candidateOf(ep discoveryv1.Endpoint, port int32, node Node) (candidate, bool) {
	if len(ep.Addresses) == 0 {
		return candidate{}, false
	}
	ip, err := netip.ParseAddr(ep.Addresses[0])
	if err != nil {
		return candidate{}, false
	}
	ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
	c := candidate{
		Endpoint:    Endpoint{IP: ip, Port: port, Local: ep.NodeName != nil && *ep.NodeName == node.Name, Ready: ready},
		ready:       ready,
		serving:     ep.Conditions.Serving == nil && ready || ep.Conditions.Serving != nil && *ep.Conditions.Serving,
		terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
	}
	if ep.Hints != nil {
		for _, z := range ep.Hints.ForZones {
			c.zoneHints = append(c.zoneHints, z.Name)
		}
		for _, n := range ep.Hints.ForNodes {
			c.nodeHints = append(c.nodeHints, n.Name)
		}
	}
	return c, true
}

// usable picks the ready endpoints among those pick accepts or, when there
// are none, the serving and terminating ones.
func usable(all []candidate, pick func(candidate) bool) []Endpoint {
	var ready, fallback []Endpoint
	for _, c := range all {
		if !pick(c) {
			continue
		}
		if c.ready {
			ready = append(ready, c.Endpoint)
		} else if c.serving && c.terminating {
			fallback = append(fallback, c.Endpoint)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return fallback
}

// topologyFilter returns the endpoint filter for the Cluster policy: by
// node hints, else zone hints, when every ready endpoint has such a hint
// and at least one names this node (zone); else no filtering.
func topologyFilter(all []candidate, node Node) func(candidate) bool {
	everyone := func(candidate) bool { return true }
	hasAll := func(get func(candidate) []string, want string) bool {
		if want == "" {
			return false
		}
		any := false
		for _, c := range all {
			if !c.ready {
				continue
			}
			h := get(c)
			if len(h) == 0 {
				return false
			}
			if slices.Contains(h, want) {
				any = true
			}
		}
		return any
	}
	nodeHints := func(c candidate) []string { return c.nodeHints }
	zoneHints := func(c candidate) []string { return c.zoneHints }
	switch {
	case hasAll(nodeHints, node.Name):
		return func(c candidate) bool { return slices.Contains(c.nodeHints, node.Name) }
	case hasAll(zoneHints, node.Zone):
		return func(c candidate) bool { return slices.Contains(c.zoneHints, node.Zone) }
	}
	return everyone
}

func ptrStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptrProto(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return ""
	}
	return *p
}
