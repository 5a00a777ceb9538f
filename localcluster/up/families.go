// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/localcluster/nodesim"
)

// IPFamily is --ip-family: the families of the simulated network, as
// kind's networking.ipFamily.
type IPFamily string

// IPFamilies (--ip-family).
const (
	IPFamilyIPv4 IPFamily = "ipv4"
	IPFamilyIPv6 IPFamily = "ipv6"
	IPFamilyDual IPFamily = "dual"
)

// IPFamilies are the values of --ip-family.
var IPFamilies = []IPFamily{IPFamilyIPv4, IPFamilyIPv6, IPFamilyDual}

// familyRanges are the range flags' defaults of one --ip-family: kind's
// Service and Pod ranges, and a LoadBalancer range of each family.
type familyRanges struct{ services, cluster, loadBalancer string }

var familyDefaults = map[IPFamily]familyRanges{
	IPFamilyIPv4: {"10.96.0.0/16", "10.244.0.0/16", "192.168.240.0/24"},
	IPFamilyIPv6: {"fd00:10:96::/112", "fd00:10:244::/56", "fd00:192:168:240::/120"},
	IPFamilyDual: {"10.96.0.0/16,fd00:10:96::/112", "10.244.0.0/16,fd00:10:244::/56", "192.168.240.0/24,fd00:192:168:240::/120"},
}

// applyFamilyDefaults gives the range flags not given the defaults of
// --ip-family. A flag was given when fs says it changed; without fs,
// when it differs from its IPv4 default.
func (o *Options) applyFamilyDefaults(fs *pflag.FlagSet) {
	d, ok := familyDefaults[o.IPFamily]
	if !ok {
		return // enumflag.Check reports it
	}
	v4 := familyDefaults[IPFamilyIPv4]
	for _, f := range []struct {
		flag       string
		value      *string
		def, v4Def string
	}{
		{"service-cluster-ip-range", &o.ServiceCIDRs, d.services, v4.services},
		{"cluster-cidr", &o.ClusterCIDR, d.cluster, v4.cluster},
		{"load-balancer-ip-range", &o.LoadBalancerRange, d.loadBalancer, v4.loadBalancer},
	} {
		given := *f.value != f.v4Def
		if fs != nil {
			given = fs.Changed(f.flag)
		}
		if !given {
			*f.value = f.def
		}
	}
}

// networkFamilies are the simulated network's families, the first
// first: for dual, the first Service range's family (IPv4 when there is
// none), as the API server's advertised address, which the kubernetes
// Service leads to, is of that family.
func networkFamilies(fam IPFamily, services []netip.Prefix) []corev1.IPFamily {
	switch fam {
	case IPFamilyIPv4:
		return []corev1.IPFamily{corev1.IPv4Protocol}
	case IPFamilyIPv6:
		return []corev1.IPFamily{corev1.IPv6Protocol}
	case IPFamilyDual:
		first := corev1.IPv4Protocol
		if len(services) > 0 {
			first = ipfamily.OfPrefix(services[0])
		}
		return []corev1.IPFamily{first, ipfamily.Other(first)}
	}
	return nil // enumflag.Check reports it
}

// checkServiceFamilies checks that the Service ranges have one of each
// of the network's families, the first of its first.
func checkServiceFamilies(fam IPFamily, families []corev1.IPFamily, services []netip.Prefix) error {
	if len(families) == 0 || len(services) == 0 {
		return nil
	}
	if first := ipfamily.OfPrefix(services[0]); first != families[0] {
		return fmt.Errorf("--service-cluster-ip-range %s: the first range must be of the network's first family (%s for --ip-family=%s)", services[0], families[0], fam)
	}
	have := familiesOf(services)
	for _, f := range families {
		if !slices.Contains(have, f) {
			return fmt.Errorf("--service-cluster-ip-range %s: --ip-family=%s needs an %s range", prefixList(services), fam, f)
		}
	}
	return nil
}

func familiesOf(ps []netip.Prefix) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, p := range ps {
		out = append(out, ipfamily.OfPrefix(p))
	}
	return out
}

// parseCIDRs parses a flag's comma-separated CIDRs, masked, at most one
// a family.
func parseCIDRs(flag, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, s, err)
		}
		out = append(out, p.Masked())
	}
	if len(out) > 2 || (len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4()) {
		return nil, fmt.Errorf("%s %q: give one range, or one IPv4 and one IPv6", flag, s)
	}
	return out, nil
}

// inFamilies orders ps as families, checking that it holds exactly one
// range of each.
func inFamilies(flag string, ps []netip.Prefix, families []corev1.IPFamily) ([]netip.Prefix, error) {
	if len(ps) != len(families) {
		return nil, fmt.Errorf("%s %s: give one range of each family of the network (%s)", flag, prefixList(ps), familyList(families))
	}
	out := make([]netip.Prefix, 0, len(ps))
	for _, f := range families {
		i := slices.IndexFunc(ps, func(p netip.Prefix) bool { return ipfamily.OfPrefix(p) == f })
		if i < 0 {
			return nil, fmt.Errorf("%s %s: no %s range, which the network has", flag, prefixList(ps), f)
		}
		out = append(out, ps[i])
	}
	return out, nil
}

// checkClusterCIDR checks that p holds a node Pod CIDR (nodesim.PodCIDR:
// a /24 or a /64) for each of nodes nodes.
func checkClusterCIDR(p netip.Prefix, nodes int) error {
	bits := 24
	if p.Addr().Is6() {
		bits = 64
	}
	if p.Bits() > bits-1 {
		return fmt.Errorf("--cluster-cidr %s must be a range of /%d or larger: each node takes a /%d", p, bits-1, bits)
	}
	if _, err := nodesim.PodCIDR(p, nodes); err != nil {
		return fmt.Errorf("--cluster-cidr %s has no room for %d nodes: %w", p, nodes, err)
	}
	return nil
}

// The fabric's ranges, one a family. The fabric is a private bridge that
// only the namespaces `svcnet up` makes are plugged into; a host's IPv6
// address ends in the digits of its IPv4 address's last number
// (172.30.0.11, fc00:f853:ccd:e793::11).
var fabricCIDRs = map[corev1.IPFamily]netip.Prefix{
	corev1.IPv4Protocol: netip.MustParsePrefix("172.30.0.0/24"),
	// kind's Docker network's IPv6 range.
	corev1.IPv6Protocol: netip.MustParsePrefix("fc00:f853:ccd:e793::/64"),
}

// Host numbers on the fabric: the fabric's own address (the API server's
// advertised address), the control plane's egress, node i at nodeHost+i,
// the client and the router of --lb-announce=bgp.
const (
	fabricHost       = 1
	controlPlaneHost = 2
	nodeHost         = 10
	clientHost       = 100
	routerHost       = 254
)

// onFabric is host's address on the fabric range of family f.
func onFabric(f corev1.IPFamily, host int) netip.Prefix {
	p := fabricCIDRs[f]
	a := p.Addr().As16()
	if f == corev1.IPv4Protocol {
		a[15] = byte(host)
		return netip.PrefixFrom(netip.AddrFrom16(a).Unmap(), p.Bits())
	}
	// The host number's decimal digits read as hexadecimal: 254 is ::254.
	digits, _ := strconv.ParseUint(strconv.Itoa(host), 16, 16)
	a[14], a[15] = byte(digits>>8), byte(digits)
	return netip.PrefixFrom(netip.AddrFrom16(a), p.Bits())
}

// fabricAddrs are host's addresses on the fabric, one in each of the
// network's families, the first family first.
func (c Config) fabricAddrs(host int) []netip.Prefix {
	var out []netip.Prefix
	for _, f := range c.ranges.families {
		out = append(out, onFabric(f, host))
	}
	return out
}

// apiServerAddr is the API server's advertised address: the fabric's own,
// of the network's first family, where a forwarder leads to it.
func (c Config) apiServerAddr() netip.Addr { return c.fabricAddrs(fabricHost)[0].Addr() }

// routedServiceCIDRs are the Service ranges of the network's families, those the
// simulated network routes.
func (c Config) routedServiceCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.ranges.services {
		if slices.Contains(c.ranges.families, ipfamily.OfPrefix(p)) {
			out = append(out, p)
		}
	}
	return out
}

// addrs are the addresses of ps.
func addrs(ps []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		out = append(out, p.Addr())
	}
	return out
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func prefixList(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func familyList(fs []corev1.IPFamily) string {
	var s []string
	for _, f := range fs {
		s = append(s, string(f))
	}
	return strings.Join(s, ",")
}
