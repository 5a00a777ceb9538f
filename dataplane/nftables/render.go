// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"net/netip"
	"strconv"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

// Fragment is what one Service contributes to the table: elements of the
// fixed sets and maps, the endpoint counts whose maps it needs, and, for
// ports with ClientIP affinity, chains and sets of its own.
type Fragment struct {
	elems   []elem
	counts  []count
	objects []*object
}

// count is one protocol and endpoint count a fragment puts in a pick's
// maps.
type count struct {
	pick  pick
	proto string
	n     int
}

// Render computes the fragment of a list of ports (a Service's) for one
// family. It is a pure function.
func Render(fam family, ports []*model.ServicePort) *Fragment {
	f := &Fragment{}
	for _, p := range ports {
		r := portRenderer{f: f, fam: fam, p: p, proto: proto(p.Protocol), seen: map[string]bool{}}
		r.render()
	}
	return f
}

// portRenderer renders one service port into a fragment.
type portRenderer struct {
	f     *Fragment
	fam   family
	p     *model.ServicePort
	proto string
	// seen are the names of the objects already in the fragment.
	seen map[string]bool
}

func (r *portRenderer) render() {
	p := r.p
	cluster := r.dest(p.ClusterIP, p.Port)
	r.elem(setClusterIPs, cluster, "")
	r.elem(setClusterIPAddrs, p.ClusterIP.String(), "")
	r.endpoints(pickEndpoints, cluster, p.InternalEndpoints(), p.InternalPolicyLocal, setNoEndpoints, setNoLocalEndpoints)
	if !p.ExternallyAccessible() {
		r.hairpins()
		return
	}
	external := setExternalIPs
	if p.ExternalPolicyLocal {
		external = setExternalIPsLocal
	}
	for _, ip := range append(append([]netip.Addr(nil), p.ExternalIPs...), p.LoadBalancerIPs...) {
		d := r.dest(ip, p.Port)
		r.elem(external, d, "")
		r.external(pickEndpoints, pickClusterEndpoints, d, setNoEndpoints, setNoLocalEndpoints)
	}
	r.firewall()
	if p.NodePort != 0 {
		np := r.proto + " . " + strconv.Itoa(int(p.NodePort))
		set := setNodePorts
		if p.ExternalPolicyLocal {
			set = setNodePortsLocal
		}
		r.elem(set, np, "")
		r.external(pickNodePort, pickNodePortCluster, np, setNoEndpointNodePorts, setNoLocalEndpointNodePts)
	}
	r.hairpins()
}

// external adds the endpoints of an external destination: its external
// ones, and under the Local policy all of them for Pods and the node,
// whether or not this node has a local endpoint (kube-proxy's
// short-circuit: only outside traffic is dropped when it has none).
func (r *portRenderer) external(own, cluster pick, key, noEndpoints, noLocal string) {
	p := r.p
	r.endpoints(own, key, p.ExternalEndpoints(), p.ExternalPolicyLocal, noEndpoints, noLocal)
	if p.ExternalPolicyLocal && p.HasEndpoints {
		r.endpoints(cluster, key, p.ClusterEndpoints, false, "", "")
	}
}

// endpoints puts the endpoints of key in pick's maps, or key in the set
// that rejects (no endpoints at all) or drops (none on this node) it.
func (r *portRenderer) endpoints(pk pick, key string, eps []model.Endpoint, local bool, noEndpoints, noLocal string) {
	switch {
	case len(eps) == 0 && noEndpoints == "":
	case len(eps) == 0 && !r.p.HasEndpoints:
		r.elem(noEndpoints, key, "")
	case len(eps) == 0:
		r.elem(noLocal, key, "")
	case r.p.AffinitySeconds > 0:
		r.elem(pk.affinityMap(), key, "goto "+r.affinityChain(eps, local))
	default:
		for i, ep := range eps {
			r.elem(pk.mapName(r.proto, len(eps)), key+" . "+strconv.Itoa(i), ep.IP.String()+" . "+strconv.Itoa(int(ep.Port)))
		}
		r.f.counts = append(r.f.counts, count{pk, r.proto, len(eps)})
	}
}

// affinityChain adds the port's own chain for ClientIP affinity and the
// sets remembering each endpoint's clients: a client seen within the
// timeout goes back to its endpoint, a new one is spread equally
// (probability 1/n, then 1/(n-1), ...) and remembered.
func (r *portRenderer) affinityChain(eps []model.Endpoint, local bool) string {
	p, fam := r.p, r.fam
	base := portChainBase(p.Namespace, p.Service, portName(p), p.Protocol)
	name := AffinityChain(p.Namespace, p.Service, portName(p), p.Protocol, local)
	if r.seen[name] {
		return name
	}
	r.seen[name] = true
	timeout := time.Duration(p.AffinitySeconds) * time.Second
	c := newChain(name)
	sets := make([]string, len(eps))
	for i, ep := range eps {
		ap := netip.AddrPortFrom(ep.IP, uint16(ep.Port))
		sets[i] = affinitySet(base, ap)
		if !r.seen[sets[i]] {
			r.seen[sets[i]] = true
			r.f.objects = append(r.f.objects, newTypedSet(sets[i], fam.addrType, timeout, knftables.DynamicFlag, knftables.TimeoutFlag).freeze())
		}
		// A returning client's entry is updated, not only looked up: its
		// timeout runs from its last connection, as iptables' recent
		// --rcheck --seconds and kube-proxy's nftables "update" have it.
		c.addWithComment(p.Name+" -> "+ap.String()+", affinity "+timeout.String(),
			"meta l4proto", r.proto, fam.ip, "saddr @"+sets[i], "update @"+sets[i], "{", fam.ip, "saddr }", "dnat", fam.ip, "to", hostPort(ep.IP, ep.Port))
	}
	for i, ep := range eps {
		parts := []string{"meta l4proto", r.proto}
		if rest := len(eps) - i; rest > 1 {
			parts = append(parts, "numgen random mod", strconv.Itoa(rest), "== 0")
		}
		parts = append(parts, "update @"+sets[i], "{", fam.ip, "saddr }", "dnat", fam.ip, "to", hostPort(ep.IP, ep.Port))
		c.add(parts...)
	}
	r.f.objects = append(r.f.objects, c.freeze())
	return name
}

// firewall lets only loadBalancerSourceRanges reach load balancer IPs.
func (r *portRenderer) firewall() {
	p := r.p
	if len(p.LoadBalancerSources) == 0 {
		return
	}
	for _, ip := range p.LoadBalancerIPs {
		d := r.dest(ip, p.Port)
		r.elem(setFirewallIPs, d, "")
		for _, src := range p.LoadBalancerSources {
			r.elem(setFirewallAllow, d+" . "+src.String(), "")
		}
		// The node's own traffic to its load balancer IPs leaves with one
		// of them as source: let it through when the node's IP is in the
		// ranges (kube-proxy's allowFromNode).
		if p.AllowFromNode {
			for _, own := range p.LoadBalancerIPs {
				r.elem(setFirewallAllow, d+" . "+own.String(), "")
			}
		}
	}
}

// hairpins masquerade an endpoint's traffic to itself through the service.
func (r *portRenderer) hairpins() {
	for _, eps := range [][]model.Endpoint{r.p.ClusterEndpoints, r.p.LocalEndpoints} {
		for _, ep := range eps {
			r.elem(setHairpin, ep.IP.String()+" . "+ep.IP.String(), "")
		}
	}
}

func (r *portRenderer) dest(ip netip.Addr, port int32) string {
	return ip.String() + " . " + r.proto + " . " + strconv.Itoa(int(port))
}

// elem adds an element for the port, commented with its name; hairpin
// elements are shared by every port of an endpoint and go uncommented.
func (r *portRenderer) elem(set, key, value string) {
	comment := r.p.Name
	if set == setHairpin {
		comment = ""
	}
	r.f.elems = append(r.f.elems, elem{set: set, key: key, value: value, comment: comment})
}

// portName is the port's name as its Name ("namespace/name:port") carries
// it; empty for an unnamed port.
func portName(p *model.ServicePort) string {
	prefix := p.Namespace + "/" + p.Service
	if len(p.Name) > len(prefix)+1 {
		return p.Name[len(prefix)+1:]
	}
	return ""
}
