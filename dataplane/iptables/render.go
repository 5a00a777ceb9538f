// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

// Config is the node's own settings that shape the rules.
type Config struct {
	// ClusterCIDRs are the Pod ranges of this family; traffic from outside
	// them to a cluster IP is masqueraded (kube-proxy's --cluster-cidr).
	ClusterCIDRs []netip.Prefix
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	// NodePortIPs are the addresses that accept NodePort traffic; empty
	// means every local address (kube-proxy's default).
	NodePortIPs []netip.Addr
	// Family is the IP family of the rules (Render takes the model's);
	// IPv6 loopback never accepts NodePort traffic.
	Family corev1.IPFamily
	// NoLocalhostNodePorts keeps NodePort traffic to 127.0.0.0/8 out, as
	// kube-proxy does when --iptables-localhost-nodeports is false or
	// --nodeport-addresses leaves out loopback. The zero value is
	// kube-proxy's default: localhost NodePorts work, which needs
	// net.ipv4.conf.all.route_localnet=1 (the agent sets it).
	NoLocalhostNodePorts bool
	// Counters are the nfacct counters the node has: the INVALID drop
	// and the localhost NodePort rules count into them, as kube-proxy's
	// do, only while they exist. Backend.Sync ensures them.
	Counters Counters
	// ConntrackTCPLiberal: the node's nf_conntrack_tcp_be_liberal is set,
	// so conntrack marks only out-of-window RSTs INVALID, and the INVALID
	// drop rule is left out, as kube-proxy leaves it out then.
	ConntrackTCPLiberal bool
}

// loopbackExcluded is the loopback range that must not accept NodePort
// traffic, if any.
func (cfg Config) loopbackExcluded() string {
	switch {
	case cfg.Family == corev1.IPv6Protocol:
		return "::1/128"
	case cfg.NoLocalhostNodePorts:
		return "127.0.0.0/8"
	}
	return ""
}

// Render computes the ruleset of a model. It is a pure function.
func Render(m *model.Model, cfg Config) *Ruleset {
	if cfg.Family == "" {
		cfg.Family = m.Family
	}
	return Assemble([]*Fragment{RenderService(m.Ports, cfg)}, cfg)
}

// Fragment is what one Service contributes to the ruleset: rules for the
// top-level chains and its own chains. An agent keeps the fragments of
// unchanged Services from one sync to the next and re-renders only the
// Services that changed.
type Fragment struct {
	filter, nat *table
	// localhostCounted are the indexes, among the fragment's rules of the
	// nat table's KUBE-NODEPORTS, of kube-proxy's rules that count
	// localhost NodePort packets. They are rendered whatever the node's
	// counters, and Assemble leaves them out while the counter does not
	// exist: no Service is re-rendered when it comes or goes.
	localhostCounted []int
}

// RenderService renders the ports of one Service (or any list of ports).
func RenderService(ports []*model.ServicePort, cfg Config) *Fragment {
	f := &Fragment{filter: newTable(), nat: newTable()}
	for _, p := range ports {
		renderPort(f, p, cfg)
	}
	for _, c := range f.nat.chains {
		if isServiceChain(c.Name) {
			c.freeze()
		}
	}
	return f
}

// Assemble builds the ruleset from fragments, in their order: the fixed
// chains, the fragments' rules in the top-level chains, and the
// fragments' own chains, which are shared, not copied.
func Assemble(frags []*Fragment, cfg Config) *Ruleset {
	filter := newTable(ChainNodePorts, ChainServices, ChainExternalServices, ChainForward, ChainProxyFirewall)
	nat := newTable(ChainNodePorts, ChainServices, ChainMarkMasq, ChainPostrouting)

	fwd := filter.chain(ChainForward)
	if !cfg.ConntrackTCPLiberal {
		invalid := "-m conntrack --ctstate INVALID"
		if cfg.Counters.InvalidDropped {
			invalid += " " + nfacctMatch(CounterInvalidDropped)
		}
		fwd.add(invalid, "-j DROP")
	}
	fwd.add(comment("kubernetes forwarding rules"), "-m mark --mark "+MasqueradeMark+"/"+MasqueradeMark, "-j ACCEPT")
	fwd.add(comment("kubernetes forwarding conntrack rule"), "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
	nat.chain(ChainMarkMasq).add("-j MARK --or-mark " + MasqueradeMark)
	post := nat.chain(ChainPostrouting)
	post.add("-m mark ! --mark " + MasqueradeMark + "/" + MasqueradeMark + " -j RETURN")
	post.add("-j MARK --xor-mark " + MasqueradeMark)
	post.add(comment("kubernetes service traffic requiring SNAT"), "-j MASQUERADE --random-fully")

	for _, f := range frags {
		for _, c := range f.filter.chains {
			top := filter.chain(c.Name)
			top.Rules = append(top.Rules, c.Rules...)
		}
		for _, c := range f.nat.chains {
			if isServiceChain(c.Name) {
				nat.chains = append(nat.chains, c)
				continue
			}
			top := nat.chain(c.Name)
			if c.Name == ChainNodePorts && !cfg.Counters.LocalhostNodePorts && len(f.localhostCounted) > 0 {
				top.Rules = appendExcept(top.Rules, c.Rules, f.localhostCounted)
				continue
			}
			top.Rules = append(top.Rules, c.Rules...)
		}
	}

	svcs := nat.chain(ChainServices)
	const last = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	excluded := cfg.loopbackExcluded()
	if len(cfg.NodePortIPs) == 0 {
		dst := "-m addrtype --dst-type LOCAL"
		if excluded != "" {
			dst += " ! -d " + excluded
		}
		svcs.add(comment(last), dst, "-j "+ChainNodePorts)
	} else {
		for _, ip := range cfg.NodePortIPs {
			if ip.IsLoopback() && excluded != "" {
				continue
			}
			svcs.add(comment(last), "-d "+ip.String(), "-j "+ChainNodePorts)
		}
	}
	return &Ruleset{Filter: filter.chains, NAT: nat.chains}
}

// appendExcept appends the rules of src but those at the indexes skip
// (ascending).
func appendExcept(dst, src []string, skip []int) []string {
	for i, rule := range src {
		if len(skip) > 0 && skip[0] == i {
			skip = skip[1:]
			continue
		}
		dst = append(dst, rule)
	}
	return dst
}

func renderPort(f *Fragment, p *model.ServicePort, cfg Config) {
	r := newPortRenderer(f, p, cfg)
	r.clusterIP()
	if p.ExternallyAccessible() {
		r.externalDestinations()
		r.nodePort()
		// The external chain is written whenever the port has endpoints
		// anywhere, even with none that external traffic may use: under
		// the Local policy, Pods and the node itself still reach the
		// cluster's endpoints through it (kube-proxy's short-circuit).
		if p.HasEndpoints {
			r.externalChain()
			r.firewallChain()
		}
	}
	r.policyChains()
	r.endpointChains()
}

// portRenderer renders one service port: the rules in the top-level
// chains that lead to it, and its own chains (KUBE-SVC/SVL/EXT/FW/SEP).
type portRenderer struct {
	frag        *Fragment
	filter, nat *table
	p           *model.ServicePort
	cfg         Config

	// pm, dst and dport match the port's protocol, cluster IP and port.
	pm, dst, dport string
	// The port's chains; internalChain is where cluster-IP traffic goes.
	svc, svl, ext, fw, internalChain string
	// hasInternal and hasExternal tell whether cluster-IP and external
	// traffic have endpoints to go to; usesFirewall whether load balancer
	// traffic goes through the KUBE-FW chain (source ranges).
	hasInternal, hasExternal, usesFirewall bool

	// seps are the endpoint chains the policy chains jump to, in first-use
	// order.
	seps     map[string]model.Endpoint
	sepOrder []string
}

func newPortRenderer(f *Fragment, p *model.ServicePort, cfg Config) *portRenderer {
	name, proto := p.Name, p.Protocol
	r := &portRenderer{
		frag: f, filter: f.filter, nat: f.nat, p: p, cfg: cfg,
		pm:    protoMatch(proto),
		dst:   "-d " + p.ClusterIP.String(),
		dport: "--dport " + strconv.Itoa(int(p.Port)),
		svc:   svcChain(name, proto), svl: svlChain(name, proto), ext: extChain(name, proto), fw: fwChain(name, proto),
		hasInternal:  len(p.InternalEndpoints()) > 0,
		hasExternal:  len(p.ExternalEndpoints()) > 0,
		usesFirewall: p.HasEndpoints && len(p.LoadBalancerIPs) > 0 && len(p.LoadBalancerSources) > 0,
		seps:         map[string]model.Endpoint{},
	}
	r.internalChain = r.svc
	if p.InternalPolicyLocal {
		r.internalChain = r.svl
	}
	return r
}

// noEndpoints is the comment and verdict for traffic with nowhere to go:
// REJECT when the port has no endpoint at all, DROP when it has none here.
func (r *portRenderer) noEndpoints() (string, string) {
	if !r.p.HasEndpoints {
		return fmt.Sprintf("%s has no endpoints", r.p.Name), "-j REJECT"
	}
	return fmt.Sprintf("%s has no local endpoints", r.p.Name), "-j DROP"
}

// clusterIP sends cluster-IP traffic to the internal policy chain, or
// rejects it.
func (r *portRenderer) clusterIP() {
	if r.hasInternal {
		r.nat.chain(ChainServices).add(comment(r.p.Name+" cluster IP"), r.pm, r.dst, r.dport, "-j "+r.internalChain)
		return
	}
	c, verdict := r.noEndpoints()
	r.filter.chain(ChainServices).add(comment(c), r.pm, r.dst, r.dport, verdict)
}

// externalDestinations sends traffic to externalIPs and LoadBalancer IPs
// to the external chain (through the firewall chain where source ranges
// apply); what the external chain does not send on is rejected (no
// endpoints) or dropped (none for external traffic) in the filter table.
func (r *portRenderer) externalDestinations() {
	p := r.p
	for _, ip := range p.ExternalIPs {
		r.toExternal(p.Name+" external IP", "-d "+ip.String(), r.ext)
	}
	for _, ip := range p.LoadBalancerIPs {
		target := r.ext
		if r.usesFirewall {
			target = r.fw
		}
		if p.HasEndpoints {
			r.nat.chain(ChainServices).add(comment(p.Name+" loadbalancer IP"), r.pm, "-d "+ip.String(), r.dport, "-j "+target)
		}
		if r.usesFirewall {
			r.filter.chain(ChainProxyFirewall).add(comment(p.Name+" traffic not accepted by "+r.fw), r.pm, "-d "+ip.String(), r.dport, "-j DROP")
		}
	}
	if !r.hasExternal {
		c, verdict := r.noEndpoints()
		for _, ip := range p.LoadBalancerIPs {
			r.filter.chain(ChainExternalServices).add(comment(c), r.pm, "-d "+ip.String(), r.dport, verdict)
		}
	}
}

func (r *portRenderer) toExternal(what, dst, target string) {
	if r.p.HasEndpoints {
		r.nat.chain(ChainServices).add(comment(what), r.pm, dst, r.dport, "-j "+target)
	}
	if !r.hasExternal {
		c, verdict := r.noEndpoints()
		r.filter.chain(ChainExternalServices).add(comment(c), r.pm, dst, r.dport, verdict)
	}
}

// nodePort handles the node port and opens the health check node port.
// Where NodePorts answer on 127.0.0.0/8, a rule before the node port's
// own sends that traffic the same way and counts it (kube-proxy's
// localhost NodePort counter; see Fragment.localhostCounted).
func (r *portRenderer) nodePort() {
	p := r.p
	if p.NodePort != 0 {
		np := "--dport " + strconv.Itoa(int(p.NodePort))
		if p.HasEndpoints {
			nodePorts := r.nat.chain(ChainNodePorts)
			if r.cfg.loopbackExcluded() == "" {
				r.frag.localhostCounted = append(r.frag.localhostCounted, len(nodePorts.Rules))
				nodePorts.add(comment(p.Name), r.pm, "-d 127.0.0.0/8", np, nfacctMatch(CounterLocalhostNodePorts), "-j "+r.ext)
			}
			nodePorts.add(comment(p.Name), r.pm, np, "-j "+r.ext)
		}
		if !r.hasExternal {
			c, verdict := r.noEndpoints()
			r.filter.chain(ChainExternalServices).add(comment(c), "-m addrtype --dst-type LOCAL", r.pm, np, verdict)
		}
	}
	if p.HealthCheckNodePort != 0 {
		r.filter.chain(ChainNodePorts).add(comment(p.Name+" health check node port"), "-m tcp -p tcp --dport "+strconv.Itoa(int(p.HealthCheckNodePort)), "-j ACCEPT")
	}
}

// externalChain (KUBE-EXT) masquerades external traffic and picks the
// policy chain; under the Local policy, traffic from Pods and from the node
// itself still goes to any endpoint, and the rest to a local one, if there
// is one: otherwise it leaves the chain without DNAT and the filter
// table's KUBE-EXTERNAL-SERVICES drops it.
func (r *portRenderer) externalChain() {
	name := r.p.Name
	e := r.nat.chain(r.ext)
	if !r.p.ExternalPolicyLocal {
		e.add(comment("masquerade traffic for "+name+" external destinations"), "-j "+ChainMarkMasq)
		e.add("-j " + r.svc)
		return
	}
	for _, cidr := range r.cfg.ClusterCIDRs {
		e.add(comment("pod traffic for "+name+" external destinations"), "-s "+cidr.String(), "-j "+r.svc)
	}
	e.add(comment("masquerade LOCAL traffic for "+name+" external destinations"), "-m addrtype --src-type LOCAL -j "+ChainMarkMasq)
	e.add(comment("route LOCAL traffic for "+name+" external destinations"), "-m addrtype --src-type LOCAL -j "+r.svc)
	if r.hasExternal {
		e.add("-j " + r.svl)
	}
}

// firewallChain (KUBE-FW) lets loadBalancerSourceRanges through to the
// external chain, and the node's own traffic to its load balancer IPs
// (sent from those IPs) when the node's IP is in the ranges;
// KUBE-PROXY-FIREWALL drops the rest.
func (r *portRenderer) firewallChain() {
	p := r.p
	if !r.usesFirewall {
		return
	}
	f := r.nat.chain(r.fw)
	for _, src := range p.LoadBalancerSources {
		f.add(comment(p.Name+" loadbalancer IP"), "-s "+src.String(), "-j "+r.ext)
	}
	if p.AllowFromNode {
		for _, ip := range p.LoadBalancerIPs {
			f.add(comment(p.Name+" loadbalancer IP"), "-s "+ip.String(), "-j "+r.ext)
		}
	}
	f.add(comment("other traffic to " + p.Name + " will be dropped by KUBE-PROXY-FIREWALL"))
}

// policyChains fills KUBE-SVC (Cluster policy) and KUBE-SVL (Local
// policy) with the masquerade rule and the endpoint jumps.
func (r *portRenderer) policyChains() {
	p := r.p
	if p.UsesClusterChain() && len(p.ClusterEndpoints) > 0 {
		c := r.nat.chain(r.svc)
		if r.internalChain == r.svc && r.hasInternal {
			r.masquerade(c)
		}
		r.endpointJumps(c, p.ClusterEndpoints)
	}
	if p.UsesLocalChain() && len(p.LocalEndpoints) > 0 {
		c := r.nat.chain(r.svl)
		if r.internalChain == r.svl && r.hasInternal {
			r.masquerade(c)
		}
		r.endpointJumps(c, p.LocalEndpoints)
	}
}

// masquerade marks cluster-IP traffic from outside the Pod network for
// masquerading; with --masquerade-all, all of it.
func (r *portRenderer) masquerade(c *Chain) {
	cfg := r.cfg
	parts := []string{comment(r.p.Name + " cluster IP"), r.pm, r.dst, r.dport}
	switch {
	case !cfg.MasqueradeAll && len(cfg.ClusterCIDRs) > 0:
		parts = append(parts, "! -s "+cfg.ClusterCIDRs[0].String())
	case !cfg.MasqueradeAll:
		return
	}
	c.add(append(parts, "-j "+ChainMarkMasq)...)
}

// endpointJumps spreads traffic equally over eps with kube-proxy's
// sequence of --probability 1/n, 1/(n-1), ...; with ClientIP affinity, a
// recent client goes back to its endpoint first.
func (r *portRenderer) endpointJumps(c *Chain, eps []model.Endpoint) {
	name, proto := r.p.Name, r.p.Protocol
	if r.p.AffinitySeconds > 0 {
		for _, ep := range eps {
			sep := sepChain(name, proto, ep.String())
			c.add(comment(name+" -> "+ep.String()), "-m recent --name "+sep, "--rcheck --seconds "+strconv.Itoa(int(r.p.AffinitySeconds))+" --reap -j "+sep)
		}
	}
	n := len(eps)
	for i, ep := range eps {
		sep := sepChain(name, proto, ep.String())
		if _, ok := r.seps[sep]; !ok {
			r.seps[sep] = ep
			r.sepOrder = append(r.sepOrder, sep)
		}
		if i < n-1 {
			c.add(comment(name+" -> "+ep.String()), fmt.Sprintf("-m statistic --mode random --probability %0.10f", 1.0/float64(n-i)), "-j "+sep)
		} else {
			c.add(comment(name+" -> "+ep.String()), "-j "+sep)
		}
	}
}

// endpointChains writes each endpoint's KUBE-SEP chain: hairpin
// masquerade, affinity record, DNAT.
func (r *portRenderer) endpointChains() {
	name := r.p.Name
	for _, sep := range r.sepOrder {
		ep := r.seps[sep]
		c := r.nat.chain(sep)
		c.add(comment(name), "-s "+ep.IP.String(), "-j "+ChainMarkMasq)
		affinity := ""
		if r.p.AffinitySeconds > 0 {
			affinity = "-m recent --name " + sep + " --set "
		}
		c.add(comment(name), r.pm, affinity+"-j DNAT --to-destination "+ep.String())
	}
}

func protoMatch(p corev1.Protocol) string {
	l := strings.ToLower(string(p))
	return "-m " + l + " -p " + l
}

// comment quotes a comment the way iptables-save prints it: bare when it
// has no spaces.
func comment(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return `-m comment --comment "` + strings.ReplaceAll(s, `"`, `'`) + `"`
	}
	return "-m comment --comment " + s
}
