// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// Preview is what the controller would do with a LoadBalancer Service's
// current addresses, given the pools: `svcnet migrate plan` says it before
// svcnet serves a cluster, so that no Service loses its address by
// surprise.
type Preview struct {
	// Kept are the status addresses that lie in a pool the Service may
	// keep addresses of; Replaced are the others, which it would lose.
	Kept, Replaced []netip.Addr
	// Read says each MetalLB annotation or spec.loadBalancerIP the
	// controller would act on, and as what.
	Read []string
	// Conflicts are requests that lose to another saying something else.
	Conflicts []string
	// Problem says why the Service's request cannot be served as it
	// stands: a request that does not parse, a named pool that gives
	// nothing.
	Problem string
}

// PreviewService previews svc (in a namespace labelled nsLabels) against
// pools and the cluster's ServiceCIDRs, with the controller's own rules:
// the same pool judgement, selection and request reading.
func PreviewService(svc *corev1.Service, pools []svcnetv1alpha1.LoadBalancerIPPool, cidrs []networkingv1.ServiceCIDR, nsLabels map[string]string) Preview {
	var p Preview
	states := judgePools(pools, cidrs)
	choice := poolChoice{keep: eligible(states, svc, nsLabels)}
	req, err := readRequest(svc)
	if err != nil {
		p.Problem = err.Error()
	} else {
		choice = choosePools(states, choice.keep, req)
		p.Problem = choice.problem
		for _, h := range req.honoured {
			p.Read = append(p.Read, h.message)
		}
		p.Conflicts = req.disagreements
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		if err != nil {
			continue // a hostname: nothing svcnet gives
		}
		if inAny(states, choice.keep, a.Unmap()) {
			p.Kept = append(p.Kept, a)
		} else {
			p.Replaced = append(p.Replaced, a)
		}
	}
	return p
}

// inAny tells whether a lies in one of the named pools.
func inAny(states map[string]*poolState, names []string, a netip.Addr) bool {
	for _, n := range names {
		for _, r := range states[n].ranges {
			if r.Contains(a) {
				return true
			}
		}
	}
	return false
}
