// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// The MetalLB Service annotations svcnet reads, so that a cluster moving
// from MetalLB keeps every address (MetalLB v0.16 reads the metallb.io/
// names first and still honours the deprecated metallb.universe.tf/ ones;
// so does svcnet). MetalLB's own metallb.io/ip-allocated-from-pool is
// written by MetalLB, not read, and svcnet ignores it.
const (
	MetalLBAnnotationIPs              = "metallb.io/loadBalancerIPs"
	MetalLBAnnotationPool             = "metallb.io/address-pool"
	MetalLBAnnotationSharingKey       = "metallb.io/allow-shared-ip"
	MetalLBLegacyAnnotationIPs        = "metallb.universe.tf/loadBalancerIPs"
	MetalLBLegacyAnnotationPool       = "metallb.universe.tf/address-pool"
	MetalLBLegacyAnnotationSharingKey = "metallb.universe.tf/allow-shared-ip"

	// fieldLoadBalancerIP is the deprecated core field, read as a
	// request for one address.
	fieldLoadBalancerIP = "spec.loadBalancerIP"
)

// The sources of each request, the first present one winning: svcnet's own
// annotation, then MetalLB's, then (addresses only) spec.loadBalancerIP.
var (
	ipSources      = []string{AnnotationIPs, MetalLBAnnotationIPs, MetalLBLegacyAnnotationIPs, fieldLoadBalancerIP}
	poolSources    = []string{AnnotationPool, MetalLBAnnotationPool, MetalLBLegacyAnnotationPool}
	sharingSources = []string{AnnotationSharingKey, MetalLBAnnotationSharingKey, MetalLBLegacyAnnotationSharingKey}
)

// serviceRequest is what a Service asks for, from whichever of its
// annotations and fields says it.
type serviceRequest struct {
	// ips are the requested addresses, at most one per family.
	ips map[corev1.IPFamily]netip.Addr
	// pool names the one pool new addresses must come from; poolFrom is
	// the source that named it.
	pool, poolFrom string
	// honoured are the fields other than svcnet's own annotations that
	// were read, said as the Event that reports them.
	honoured []honouredField
	// disagreements are sources that lost to another that says something
	// else, said as the Warning that reports them.
	disagreements []string
}

// honouredField is a MetalLB annotation or spec.loadBalancerIP that
// svcnet acted on.
type honouredField struct {
	// as is svcnet's annotation it stood for.
	as              string
	reason, message string
}

// readRequest reads what svc asks for. An error says which source it could
// not read; the Service should then be left as it is.
func readRequest(svc *corev1.Service) (serviceRequest, error) {
	req := serviceRequest{ips: map[corev1.IPFamily]netip.Addr{}}
	ipsFrom, ips := pick(svc, ipSources)
	if ipsFrom != "" {
		var err error
		if req.ips, err = parseIPsFor(ipsFrom, ips); err != nil {
			return serviceRequest{}, fmt.Errorf("%s: %w", describeSource(ipsFrom), err)
		}
	}
	req.poolFrom, req.pool = pick(svc, poolSources)
	sharingFrom, sharing := pick(svc, sharingSources)
	for _, s := range []struct{ from, value, as string }{
		{ipsFrom, ips, AnnotationIPs}, {req.poolFrom, req.pool, AnnotationPool}, {sharingFrom, sharing, AnnotationSharingKey},
	} {
		if h, ok := honour(s.from, s.value, s.as); ok {
			req.honoured = append(req.honoured, h)
		}
	}
	for _, sources := range [][]string{ipSources, poolSources, sharingSources} {
		req.disagreements = append(req.disagreements, disagreements(svc, sources)...)
	}
	return req, nil
}

// sharingKey is the key under which svc shares its address: svcnet's
// annotation, else MetalLB's.
func sharingKey(svc *corev1.Service) string {
	_, key := pick(svc, sharingSources)
	return key
}

// value returns what source says on svc ("" when it says nothing).
func value(svc *corev1.Service, source string) string {
	if source == fieldLoadBalancerIP {
		return strings.TrimSpace(svc.Spec.LoadBalancerIP)
	}
	return strings.TrimSpace(svc.Annotations[source])
}

// pick returns the first of sources that says something, and what.
func pick(svc *corev1.Service, sources []string) (string, string) {
	for _, s := range sources {
		if v := value(svc, s); v != "" {
			return s, v
		}
	}
	return "", ""
}

// disagreements lists, for sources of one request, each source that says
// something other than the winner.
func disagreements(svc *corev1.Service, sources []string) []string {
	var out []string
	winner, winning := "", ""
	for _, s := range sources {
		v := value(svc, s)
		switch {
		case v == "":
		case winner == "":
			winner, winning = s, v
		case !sameRequest(s, v, winner, winning):
			out = append(out, fmt.Sprintf("%s %q and %s %q disagree; svcnet uses %s", describeSource(winner), winning, describeSource(s), v, describeSource(winner)))
		}
	}
	return out
}

// sameRequest reports whether two sources ask for the same thing: address
// lists are compared as sets.
func sameRequest(sourceA, a, sourceB, b string) bool {
	if !slices.Contains(ipSources, sourceA) {
		return a == b
	}
	x, errX := parseIPsFor(sourceA, a)
	y, errY := parseIPsFor(sourceB, b)
	return errX == nil && errY == nil && maps.Equal(x, y)
}

// parseIPsFor reads the addresses one source requests.
func parseIPsFor(source, v string) (map[corev1.IPFamily]netip.Addr, error) {
	if source == fieldLoadBalancerIP {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", v)
		}
		return map[corev1.IPFamily]netip.Addr{ipfamily.Of(a.Unmap()): a.Unmap()}, nil
	}
	return parseRequested(v)
}

// honour says, for a request read from a source other than svcnet's own
// annotation, which field svcnet read and what it took it for.
func honour(from, v, as string) (honouredField, bool) {
	switch {
	case from == "" || strings.HasPrefix(from, "svcnet.io/"):
		return honouredField{}, false
	case from == fieldLoadBalancerIP:
		return honouredField{as, ReasonLoadBalancerIPHonoured, fmt.Sprintf("%s %q used as %s", from, v, as)}, true
	}
	return honouredField{as, ReasonMetalLBAnnotationHonoured, fmt.Sprintf("%s %q used as %s", from, v, as)}, true
}

func describeSource(s string) string {
	if s == fieldLoadBalancerIP {
		return s
	}
	return "annotation " + s
}

// poolChoice is which pools a Service may take a new address from, with or
// without requesting it, and which it may keep an address of.
type poolChoice struct {
	// automatic are the pools of an address nobody requested: the pool
	// named, else the pools that assign automatically.
	automatic []string
	// onRequest are the pools of a requested address: the pool named,
	// else every pool that takes the Service.
	onRequest []string
	// keep are the pools whose addresses the Service may keep: every
	// pool that takes it, whatever it names or requests, so that a change
	// of annotation never moves a live address.
	keep []string
	// problem, when set, says why the pool named gives nothing.
	problem string
}

// choosePools decides which pools serve svc. eligible lists the Ready pools
// whose selectors take it, in the order to try them.
func choosePools(states map[string]*poolState, eligible []string, req serviceRequest) poolChoice {
	c := poolChoice{keep: eligible}
	if req.pool != "" {
		st, ok := states[req.pool]
		switch {
		case !ok:
			c.problem = fmt.Sprintf("LoadBalancerIPPool %s, named by %s, does not exist", req.pool, describeSource(req.poolFrom))
		case !slices.Contains(eligible, req.pool) && !st.ready:
			c.problem = fmt.Sprintf("LoadBalancerIPPool %s, named by %s, gives no address: %s", req.pool, describeSource(req.poolFrom), st.message)
		case !slices.Contains(eligible, req.pool):
			c.problem = fmt.Sprintf("LoadBalancerIPPool %s, named by %s, does not take this Service (its namespaceSelector or serviceSelector)", req.pool, describeSource(req.poolFrom))
		default:
			c.automatic, c.onRequest = []string{req.pool}, []string{req.pool}
		}
		return c
	}
	c.onRequest = eligible
	for _, name := range eligible {
		if states[name].pool.Spec.Assignment != svcnetv1alpha1.PoolAssignmentOnRequest {
			c.automatic = append(c.automatic, name)
		}
	}
	return c
}
