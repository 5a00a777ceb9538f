// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"net/netip"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
)

// Config is the node's own settings that shape the table.
type Config struct {
	// ClusterCIDRs are the Pod ranges of this family; traffic from outside
	// them to a cluster IP is masqueraded (kube-proxy's --cluster-cidr).
	ClusterCIDRs []netip.Prefix
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
}

// layout returns the table's fixed objects: the chains hooked into the
// kernel, the dispatch chains, the sets that classify destinations, and for
// each way of picking an endpoint, its chain with a rule per endpoint count
// and protocol in use (counts, in order) and the maps of those counts.
func layout(fam family, cfg Config, node dataplane.Node, counts map[pick][]count) []*object {
	nodePortIPs := node.NodePortIPs
	var objs []*object
	objs = append(objs, layoutSets(fam)...)
	objs = append(objs, layoutFilter(fam, nodePortIPs)...)
	objs = append(objs, clusterIPsCheck(fam, node.ServiceCIDRs))
	objs = append(objs, layoutNAT(fam, cfg, nodePortIPs)...)
	for _, p := range picks {
		objs = append(objs, layoutPick(fam, p, counts[p])...)
	}
	for _, o := range objs {
		o.freeze()
	}
	return objs
}

func layoutSets(fam family) []*object {
	dest := fam.dest()
	const port = "meta l4proto . th dport"
	destFields := []field{fieldAddr, fieldProto, fieldPort}
	portFields := []field{fieldProto, fieldPort}
	return []*object{
		newSet(setClusterIPs, dest, "cluster IP and port of every service port").withFields(destFields),
		newSet(setExternalIPs, dest, "external and load balancer IPs of service ports with external traffic policy Cluster").withFields(destFields),
		newSet(setExternalIPsLocal, dest, "external and load balancer IPs of service ports with external traffic policy Local").withFields(destFields),
		newSet(setNodePorts, port, "node ports with external traffic policy Cluster").withFields(portFields),
		newSet(setNodePortsLocal, port, "node ports with external traffic policy Local").withFields(portFields),
		newSet(setNoEndpoints, dest, "service ports with no endpoints: rejected").withFields(destFields),
		newSet(setNoLocalEndpoints, dest, "service ports with no endpoints on this node under a Local policy: dropped").withFields(destFields),
		newSet(setNoEndpointNodePorts, port, "node ports with no endpoints: rejected").withFields(portFields),
		newSet(setNoLocalEndpointNodePts, port, "node ports with no endpoints on this node under a Local policy: dropped").withFields(portFields),
		newSet(setFirewallIPs, dest, "load balancer IPs with loadBalancerSourceRanges").withFields(destFields),
		newSet(setFirewallAllow, dest+" . "+fam.ip+" saddr", "sources allowed to each load balancer IP", knftables.IntervalFlag).
			withFields([]field{fieldAddr, fieldProto, fieldPort, fieldAddrRange}),
		newSet(setHairpin, fam.ip+" saddr . "+fam.ip+" daddr", "endpoints reaching themselves through a service: masqueraded").
			withFields([]field{fieldAddr, fieldAddr}),
		newSet(setNodePortIPs, fam.ip+" daddr", "addresses accepting node port traffic (--nodeport-addresses)").withFields([]field{fieldAddr}),
		newSet(setClusterIPAddrs, fam.ip+" daddr", "every cluster IP").withFields([]field{fieldAddr}),
	}
}

// layoutFilter rejects or drops new connections to ports with no
// endpoints, and drops load balancer traffic from outside its source
// ranges, before DNAT.
func layoutFilter(fam family, nodePortIPs []netip.Addr) []*object {
	dest := fam.dest()
	const port = "meta l4proto . th dport"
	const filterPrio, preDNATPrio = knftables.BaseChainPriority("filter - 10"), knftables.BaseChainPriority("-110")
	nodePortDst := fam.ip + " daddr != " + fam.loopback
	if len(nodePortIPs) > 0 {
		nodePortDst = fam.ip + " daddr @" + setNodePortIPs
	}
	return []*object{
		newBaseChain(chainFilterPrerouting, knftables.FilterType, knftables.PreroutingHook, preDNATPrio).
			add("ct state new jump", chainFirewallCheck),
		newBaseChain(chainFilterInput, knftables.FilterType, knftables.InputHook, filterPrio).
			add("ct state new jump", chainNodePortsCheck).
			add("ct state new jump", chainEndpointsCheck),
		newBaseChain(chainFilterForward, knftables.FilterType, knftables.ForwardHook, filterPrio).
			add("ct state new jump", chainEndpointsCheck).
			add("ct state new jump", chainClusterIPsCheck),
		newBaseChain(chainFilterOutput, knftables.FilterType, knftables.OutputHook, filterPrio).
			add("ct state new jump", chainEndpointsCheck).
			add("ct state new jump", chainClusterIPsCheck),
		newBaseChain(chainFilterOutputPreDNAT, knftables.FilterType, knftables.OutputHook, preDNATPrio).
			add("ct state new jump", chainFirewallCheck),
		newChain(chainFirewallCheck).
			add(dest, "@"+setFirewallIPs, dest, ".", fam.ip, "saddr != @"+setFirewallAllow, "drop"),
		newChain(chainEndpointsCheck).
			add(dest, "@"+setNoEndpoints, "reject").
			add(dest, "@"+setNoLocalEndpoints, "drop"),
		newChain(chainNodePortsCheck).
			add(nodePortDst, port, "@"+setNoEndpointNodePorts, "reject").
			add(nodePortDst, port, "@"+setNoLocalEndpointNodePts, "drop"),
	}
}

// clusterIPsCheck catches new connections to a cluster IP that DNAT left
// alone: to a port the Service does not define, rejected; to an address of
// a ServiceCIDR that no Service has, dropped. kube-proxy's nftables mode
// does both (its cluster-ips set and ServiceCIDR watch); its iptables mode
// neither.
func clusterIPsCheck(fam family, serviceCIDRs []netip.Prefix) *object {
	c := newChain(chainClusterIPsCheck).
		addWithComment("reject traffic to undefined ports of cluster IPs", fam.ip, "daddr @"+setClusterIPAddrs, "reject")
	if len(serviceCIDRs) > 0 {
		c.addWithComment("drop traffic to unallocated cluster IPs", fam.ip, "daddr", cidrSet(serviceCIDRs), "drop")
	}
	return c
}

// layoutNAT sends cluster IPs, external IPs and node ports to the chains
// that pick an endpoint, masquerading where kube-proxy does.
func layoutNAT(fam family, cfg Config, nodePortIPs []netip.Addr) []*object {
	dest := fam.dest()
	const port = "meta l4proto . th dport"
	services := newChain(chainServices)
	switch {
	case cfg.MasqueradeAll:
		services.add(dest, "@"+setClusterIPs, "jump", chainMarkMasq)
	case len(cfg.ClusterCIDRs) > 0:
		services.add(fam.ip, "saddr !=", cidrSet(cfg.ClusterCIDRs), dest, "@"+setClusterIPs, "jump", chainMarkMasq)
	}
	services.add(dest, "@"+setClusterIPs, "goto", pickEndpoints.chain).
		add(dest, "@"+setExternalIPs, "goto", chainExternal).
		add(dest, "@"+setExternalIPsLocal, "goto", chainExternalLocal)
	if len(nodePortIPs) > 0 {
		services.add(fam.ip, "daddr", "@"+setNodePortIPs, "jump", chainNodePorts)
	} else {
		services.add("fib daddr type local", fam.ip, "daddr !=", fam.loopback, "jump", chainNodePorts)
	}
	return []*object{
		newBaseChain(chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority).add("jump", chainServices),
		newBaseChain(chainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority).add("jump", chainServices),
		newBaseChain(chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority).add("jump", chainMasquerading),
		services,
		externalChain(chainExternal, pickEndpoints),
		localPolicyChain(fam, cfg, chainExternalLocal, pickEndpoints, pickClusterEndpoints),
		newChain(chainNodePorts).
			add(port, "@"+setNodePorts, "goto", chainNodePortExternal).
			add(port, "@"+setNodePortsLocal, "goto", chainNodePortLocal),
		externalChain(chainNodePortExternal, pickNodePort),
		localPolicyChain(fam, cfg, chainNodePortLocal, pickNodePort, pickNodePortCluster),
		newChain(chainMarkMasq).add("meta mark set meta mark |", masqueradeMark),
		newChain(chainMasquerading).
			add("ct status dnat", fam.ip, "saddr .", fam.ip, "daddr", "@"+setHairpin, "jump", chainMarkMasq).
			add("meta mark &", masqueradeMark, "== 0 return").
			add("meta mark set meta mark ^", masqueradeMark).
			add("masquerade fully-random"),
	}
}

// externalChain masquerades external traffic under the Cluster policy and
// picks any endpoint.
func externalChain(name string, p pick) *object {
	return newChain(name).add("jump", chainMarkMasq).add("goto", p.chain)
}

// localPolicyChain handles external traffic under the Local policy: from
// Pods and from the node itself it may still go to any endpoint (the
// node's own traffic masqueraded), the rest only to this node's.
func localPolicyChain(fam family, cfg Config, name string, local, cluster pick) *object {
	c := newChain(name)
	if len(cfg.ClusterCIDRs) > 0 {
		c.add(fam.ip, "saddr", cidrSet(cfg.ClusterCIDRs), "goto", cluster.chain)
	}
	return c.add("fib saddr type local jump", chainMarkMasq).
		add("fib saddr type local goto", cluster.chain).
		add("goto", local.chain)
}

// layoutPick is a pick's chain, its affinity verdict map and its data maps,
// one per protocol and endpoint count. A map's value is declared
// "<protocol> dport" and its rule starts with the protocol: nft 1.0.6
// cannot read a map whose value is declared "th dport" back from the
// kernel, and it derives from a declared protocol a match on it.
func layoutPick(fam family, p pick, counts []count) []*object {
	key := fam.key(p)
	keyFields := []field{fieldAddr, fieldProto, fieldPort, fieldBucket}
	if p.nodePort {
		keyFields = keyFields[1:]
	}
	c := newChain(p.chain).add(key, "vmap @"+p.affinityMap())
	objs := []*object{newMap(p.affinityMap(), key+" : verdict", "service ports with ClientIP affinity")}
	for _, cnt := range counts {
		n, name := strconv.Itoa(cnt.n), p.mapName(cnt.proto, cnt.n)
		c.add("meta l4proto", cnt.proto, "dnat", fam.ip, "to", key, ". numgen random mod", n, "map @"+name)
		objs = append(objs, newMap(name, key+" . numgen random mod "+n+" : "+fam.ip+" daddr . "+cnt.proto+" dport",
			cnt.proto+" service ports with "+n+" endpoints").withFields(keyFields, fieldAddr, fieldPort))
	}
	return append(objs, c)
}

func cidrSet(cidrs []netip.Prefix) string {
	ss := make([]string, len(cidrs))
	for i, c := range cidrs {
		ss[i] = c.String()
	}
	return "{ " + strings.Join(ss, ", ") + " }"
}
