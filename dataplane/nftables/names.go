// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// Mode is this backend's name for `svcnet agent --mode`.
const Mode = "nftables"

// TableName is the table svcnet owns in each IP family.
const TableName = "svcnet"

// KubeProxyTableName is kube-proxy's nftables table, removed by an agent
// starting in iptables mode (as kube-proxy does when it changes mode).
const KubeProxyTableName = "kube-proxy"

// masqueradeMark is kube-proxy's masquerade bit (--iptables-masquerade-bit
// 14), shared with iptables mode so a node can move between modes.
const masqueradeMark = "0x4000"

// Fixed chains.
const (
	chainNATPrerouting       = "nat-prerouting"
	chainNATOutput           = "nat-output"
	chainNATPostrouting      = "nat-postrouting"
	chainFilterPrerouting    = "filter-prerouting"
	chainFilterInput         = "filter-input"
	chainFilterForward       = "filter-forward"
	chainFilterOutput        = "filter-output"
	chainFilterOutputPreDNAT = "filter-output-pre-dnat"
	chainServices            = "services"
	chainExternal            = "external"
	chainExternalLocal       = "external-local"
	chainNodePorts           = "nodeports"
	chainNodePortExternal    = "nodeport-external"
	chainNodePortLocal       = "nodeport-external-local"
	chainMarkMasq            = "mark-for-masquerade"
	chainMasquerading        = "masquerading"
	chainFirewallCheck       = "firewall-check"
	chainEndpointsCheck      = "service-endpoints-check"
	chainNodePortsCheck      = "nodeport-endpoints-check"
	chainClusterIPsCheck     = "cluster-ips-check"
)

// Fixed sets, keyed by destination (address . protocol . port) unless
// noted.
const (
	setClusterIPs             = "cluster-ips"
	setExternalIPs            = "external-ips"
	setExternalIPsLocal       = "external-ips-local"
	setNodePorts              = "service-nodeports"       // protocol . port
	setNodePortsLocal         = "service-nodeports-local" // protocol . port
	setNoEndpoints            = "no-endpoint-services"
	setNoLocalEndpoints       = "no-local-endpoint-services"
	setNoEndpointNodePorts    = "no-endpoint-nodeports"       // protocol . port
	setNoLocalEndpointNodePts = "no-local-endpoint-nodeports" // protocol . port
	setFirewallIPs            = "firewall-ips"
	setFirewallAllow          = "firewall-allow"       // destination . source range
	setHairpin                = "hairpin"              // endpoint . endpoint
	setNodePortIPs            = "nodeport-ips"         // address
	setClusterIPAddrs         = "cluster-ip-addresses" // address
)

// pick is one way of choosing an endpoint: its chain, the key its maps are
// looked up by, and whose endpoints its maps hold.
type pick struct {
	chain string
	// nodePort picks are keyed by protocol . port, the others by
	// destination address . protocol . port.
	nodePort bool
}

var (
	// pickEndpoints chooses among a destination's own endpoints: the
	// internal ones for a cluster IP, the external ones otherwise.
	pickEndpoints = pick{chain: "endpoints"}
	// pickClusterEndpoints chooses among all endpoints of a destination
	// whose external policy is Local, for traffic from Pods and the node.
	pickClusterEndpoints = pick{chain: "cluster-endpoints"}
	pickNodePort         = pick{chain: "nodeport-endpoints", nodePort: true}
	pickNodePortCluster  = pick{chain: "nodeport-cluster-endpoints", nodePort: true}

	picks = []pick{pickEndpoints, pickClusterEndpoints, pickNodePort, pickNodePortCluster}
)

// mapName is the data map of the ports of a protocol with n endpoints.
func (p pick) mapName(proto string, n int) string {
	k := mapNameKey{p.chain, proto, n}
	if name, ok := mapNames.Load(k); ok {
		return name.(string)
	}
	name := p.chain + "-" + proto + "-" + strconv.Itoa(n)
	mapNames.Store(k, name)
	return name
}

// mapNames holds the map names made so far: every element of a map
// names it, and at 50,000 Services a string per element was tens of
// megabytes.
var mapNames sync.Map

type mapNameKey struct {
	chain, proto string
	n            int
}

// affinityMap is the verdict map sending ports with ClientIP affinity to
// their own chains.
func (p pick) affinityMap() string { return p.chain + "-affinity" }

// family holds the words that differ between the ip and ip6 tables.
type family struct {
	nft      knftables.Family
	ip       string // "ip" / "ip6"
	addrType string
	loopback string
}

var (
	familyIPv4 = family{nft: knftables.IPv4Family, ip: "ip", addrType: "ipv4_addr", loopback: "127.0.0.0/8"}
	familyIPv6 = family{nft: knftables.IPv6Family, ip: "ip6", addrType: "ipv6_addr", loopback: "::1"}
)

func familyOf(f corev1.IPFamily) family {
	if f == corev1.IPv6Protocol {
		return familyIPv6
	}
	return familyIPv4
}

// dest is the packet's destination as the sets key it.
func (f family) dest() string {
	return f.ip + " daddr . meta l4proto . th dport"
}

func (f family) key(p pick) string {
	if p.nodePort {
		return "meta l4proto . th dport"
	}
	return f.dest()
}

// hostPort writes addr:port the way a dnat statement takes it.
func hostPort(a netip.Addr, port int32) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}

func proto(p corev1.Protocol) string { return strings.ToLower(string(p)) }

// portHash is the 8-character hash kube-proxy's nftables mode puts in
// front of a service port's chain name.
func portHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

// portChainBase is "<hash>-<namespace>/<name>/<protocol>/<port name>", the
// readable part of a service port's chain and set names.
func portChainBase(namespace, service, portName string, p corev1.Protocol) string {
	base := namespace + "/" + service + "/" + proto(p) + "/" + portName
	return portHash(base) + "-" + base
}

// AffinityChain names the chain of a service port with ClientIP affinity:
// "service-" for its cluster endpoints, "local-" for its local ones.
func AffinityChain(namespace, service, portName string, p corev1.Protocol, local bool) string {
	prefix := "service-"
	if local {
		prefix = "local-"
	}
	return prefix + portChainBase(namespace, service, portName, p)
}

// affinitySet names the set of the clients an endpoint of a service port
// with ClientIP affinity served recently.
func affinitySet(base string, ep netip.AddrPort) string {
	// nft takes no colon in a name: an IPv6 address is written with dots,
	// as kube-proxy writes it in its endpoint chains' names.
	return "affinity-" + base + "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
}

// EndpointCount counts the endpoints a listing of svcnet's table (`nft list
// table ip svcnet`) gives a destination ("10.96.0.10 . tcp . 80"): its
// buckets in the endpoints-<protocol>-<N> maps. -1: the destination is
// not there.
func EndpointCount(listing, dest string) int {
	if !strings.Contains(listing, dest) {
		return -1
	}
	n := 0
	for _, line := range strings.Split(listing, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "elements = {"))
		for _, elem := range strings.Split(line, ",") {
			elem = strings.TrimSpace(elem)
			rest, ok := strings.CutPrefix(elem, dest+" . ")
			if !ok {
				continue
			}
			if bucket, _, ok := strings.Cut(rest, " "); ok && isDigits(bucket) && strings.Contains(rest, " : ") {
				n++
			}
		}
	}
	return n
}

// KubeProxyEndpointCount counts the endpoints of a service port in a
// listing of kube-proxy's nftables table, from its
// service-<hash>-<namespace>/<name>/<protocol>/<port name> chain: the N of
// its `numgen random mod N`, else its endpoint gotos and DNATs. -1: no
// such chain.
func KubeProxyEndpointCount(listing, namespace, service, portName string, p corev1.Protocol) int {
	suffix := "-" + namespace + "/" + service + "/" + proto(p) + "/" + portName + " {"
	n, in := -1, false
	for _, line := range strings.Split(listing, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "chain service-") && strings.HasSuffix(t, suffix):
			n, in = 0, true
		case in && t == "}":
			in = false
		case in:
			if _, rest, ok := strings.Cut(t, "numgen random mod "); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if v, err := strconv.Atoi(f[0]); err == nil {
						return v
					}
				}
			}
			n += strings.Count(t, "goto endpoint-")
			if strings.Contains(t, "dnat") {
				n++
			}
		}
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
