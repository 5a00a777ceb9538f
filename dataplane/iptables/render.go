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
}

// Render computes the ruleset of a model. It is a pure function.
func Render(m *model.Model, cfg Config) *Ruleset {
	return Assemble([]*Fragment{RenderService(m.Ports, cfg)}, cfg)
}

// Fragment is what one Service contributes to the ruleset: rules for the
// top-level chains and its own chains. An agent keeps the fragments of
// unchanged Services from one sync to the next and re-renders only the
// Services that changed.
type Fragment struct {
	filter, nat *table
}

// RenderService renders the ports of one Service (or any list of ports).
func RenderService(ports []*model.ServicePort, cfg Config) *Fragment {
	f := &Fragment{filter: newTable(), nat: newTable()}
	for _, p := range ports {
		renderPort(f.filter, f.nat, p, cfg)
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
	fwd.add("-m conntrack --ctstate INVALID -j DROP")
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
			top.Rules = append(top.Rules, c.Rules...)
		}
	}

	svcs := nat.chain(ChainServices)
	const last = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	if len(cfg.NodePortIPs) == 0 {
		svcs.add(comment(last), "-m addrtype --dst-type LOCAL -j "+ChainNodePorts)
	} else {
		for _, ip := range cfg.NodePortIPs {
			svcs.add(comment(last), "-d "+ip.String(), "-j "+ChainNodePorts)
		}
	}
	return &Ruleset{Filter: filter.chains, NAT: nat.chains}
}

func renderPort(filter, nat *table, p *model.ServicePort, cfg Config) {
	name, proto := p.Name, p.Protocol
	pm := protoMatch(proto)
	dport := "--dport " + strconv.Itoa(int(p.Port))
	svc, svl, ext, fw := svcChain(name, proto), svlChain(name, proto), extChain(name, proto), fwChain(name, proto)

	internal := p.InternalEndpoints()
	external := p.ExternalEndpoints()
	hasInternal, hasExternal := len(internal) > 0, len(external) > 0
	internalChain := svc
	if p.InternalPolicyLocal {
		internalChain = svl
	}
	noEndpoints := func() (string, string) {
		if !p.HasEndpoints {
			return fmt.Sprintf("%s has no endpoints", name), "-j REJECT"
		}
		return fmt.Sprintf("%s has no local endpoints", name), "-j DROP"
	}

	// Cluster IP.
	dst := "-d " + p.ClusterIP.String()
	if hasInternal {
		nat.chain(ChainServices).add(comment(name+" cluster IP"), pm, dst, dport, "-j "+internalChain)
	} else {
		c, verdict := noEndpoints()
		filter.chain(ChainServices).add(comment(c), pm, dst, dport, verdict)
	}

	// External destinations.
	if p.ExternallyAccessible() {
		for _, ip := range p.ExternalIPs {
			if hasExternal {
				nat.chain(ChainServices).add(comment(name+" external IP"), pm, "-d "+ip.String(), dport, "-j "+ext)
			} else {
				c, verdict := noEndpoints()
				filter.chain(ChainExternalServices).add(comment(c), pm, "-d "+ip.String(), dport, verdict)
			}
		}
		for _, ip := range p.LoadBalancerIPs {
			target := ext
			if len(p.LoadBalancerSources) > 0 {
				target = fw
				filter.chain(ChainProxyFirewall).add(comment(name+" traffic not accepted by "+fw), pm, "-d "+ip.String(), dport, "-j DROP")
			}
			if hasExternal {
				nat.chain(ChainServices).add(comment(name+" loadbalancer IP"), pm, "-d "+ip.String(), dport, "-j "+target)
			} else {
				c, verdict := noEndpoints()
				filter.chain(ChainExternalServices).add(comment(c), pm, "-d "+ip.String(), dport, verdict)
			}
		}
		if p.NodePort != 0 {
			np := "--dport " + strconv.Itoa(int(p.NodePort))
			if hasExternal {
				nat.chain(ChainNodePorts).add(comment(name), pm, np, "-j "+ext)
			} else {
				c, verdict := noEndpoints()
				filter.chain(ChainExternalServices).add(comment(c), "-m addrtype --dst-type LOCAL", pm, np, verdict)
			}
		}
		if p.HealthCheckNodePort != 0 {
			filter.chain(ChainNodePorts).add(comment(name+" health check node port"), "-m tcp -p tcp --dport "+strconv.Itoa(int(p.HealthCheckNodePort)), "-j ACCEPT")
		}
		if hasExternal {
			e := nat.chain(ext)
			if p.ExternalPolicyLocal {
				for _, cidr := range cfg.ClusterCIDRs {
					e.add(comment("pod traffic for "+name+" external destinations"), "-s "+cidr.String(), "-j "+svc)
				}
				e.add(comment("masquerade LOCAL traffic for "+name+" external destinations"), "-m addrtype --src-type LOCAL -j "+ChainMarkMasq)
				e.add(comment("route LOCAL traffic for "+name+" external destinations"), "-m addrtype --src-type LOCAL -j "+svc)
				e.add("-j " + svl)
			} else {
				e.add(comment("masquerade traffic for "+name+" external destinations"), "-j "+ChainMarkMasq)
				e.add("-j " + svc)
			}
			if len(p.LoadBalancerSources) > 0 && len(p.LoadBalancerIPs) > 0 {
				f := nat.chain(fw)
				for _, src := range p.LoadBalancerSources {
					f.add(comment(name+" loadbalancer IP"), "-s "+src.String(), "-j "+ext)
				}
				f.add(comment("other traffic to " + name + " will be dropped by KUBE-PROXY-FIREWALL"))
			}
		}
	}

	// Policy chains and endpoints.
	// Traffic to the cluster IP from outside the Pod network is
	// masqueraded; with --masquerade-all, all of it.
	masq := ""
	if !cfg.MasqueradeAll && len(cfg.ClusterCIDRs) > 0 {
		masq = "! -s " + cfg.ClusterCIDRs[0].String()
	}
	writeMasq := func(c *Chain) {
		if !cfg.MasqueradeAll && masq == "" {
			return
		}
		parts := []string{comment(name + " cluster IP"), pm, dst, dport}
		if masq != "" {
			parts = append(parts, masq)
		}
		c.add(append(parts, "-j "+ChainMarkMasq)...)
	}
	seps := map[string]model.Endpoint{}
	var sepOrder []string
	writeEndpoints := func(c *Chain, eps []model.Endpoint) {
		if p.AffinitySeconds > 0 {
			for _, ep := range eps {
				sep := sepChain(name, proto, ep.String())
				c.add(comment(name+" -> "+ep.String()), "-m recent --name "+sep, "--rcheck --seconds "+strconv.Itoa(int(p.AffinitySeconds))+" --reap -j "+sep)
			}
		}
		n := len(eps)
		for i, ep := range eps {
			sep := sepChain(name, proto, ep.String())
			if _, ok := seps[sep]; !ok {
				seps[sep] = ep
				sepOrder = append(sepOrder, sep)
			}
			if i < n-1 {
				c.add(comment(name+" -> "+ep.String()), fmt.Sprintf("-m statistic --mode random --probability %0.10f", 1.0/float64(n-i)), "-j "+sep)
			} else {
				c.add(comment(name+" -> "+ep.String()), "-j "+sep)
			}
		}
	}
	if p.UsesClusterChain() && len(p.ClusterEndpoints) > 0 {
		c := nat.chain(svc)
		if internalChain == svc && hasInternal {
			writeMasq(c)
		}
		writeEndpoints(c, p.ClusterEndpoints)
	}
	if p.UsesLocalChain() && len(p.LocalEndpoints) > 0 {
		c := nat.chain(svl)
		if internalChain == svl && hasInternal {
			writeMasq(c)
		}
		writeEndpoints(c, p.LocalEndpoints)
	}
	for _, sep := range sepOrder {
		ep := seps[sep]
		c := nat.chain(sep)
		c.add(comment(name), "-s "+ep.IP.String(), "-j "+ChainMarkMasq)
		affinity := ""
		if p.AffinitySeconds > 0 {
			affinity = "-m recent --name " + sep + " --set "
		}
		c.add(comment(name), pm, affinity+"-j DNAT --to-destination "+ep.String())
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
