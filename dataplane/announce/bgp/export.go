// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v3/api"
)

// exportPolicyName is the global export policy that keeps each address
// to the peers of its announcement.
const exportPolicyName = "svcnet-peers"

// exportPolicy is which routes each peer may hear: those of the
// addresses whose announcement lists the peer. GoBGP sends every path of its global RIB
// to every neighbor, and per-neighbor export policies only apply to
// route-server clients; a global export policy whose statements match the
// neighbor a path is sent to does it instead: for each peer, accept its
// addresses of each family, reject the rest.
type exportPolicy map[netip.Addr][]netip.Prefix // by peer, routes sorted

// exportPolicyOf is the policy for paths and peers. A peer no path names
// hears nothing.
func exportPolicyOf(paths []Path, peers []netip.Addr) exportPolicy {
	e := exportPolicy{}
	for _, p := range peers {
		e[p] = nil
	}
	for _, path := range paths {
		for _, p := range path.Peers {
			if _, ok := e[p]; ok {
				e[p] = append(e[p], path.Prefix)
			}
		}
	}
	for p, addrs := range e {
		slices.SortFunc(addrs, netip.Prefix.Compare)
		e[p] = slices.Compact(addrs)
	}
	return e
}

func (e exportPolicy) equal(o exportPolicy) bool {
	return maps.EqualFunc(e, o, slices.Equal)
}

// request is the whole routing policy: per peer a neighbor set and a
// prefix set per family, and the statements of exportPolicyName in peer
// order.
func (e exportPolicy) request() *api.SetPoliciesRequest {
	req := &api.SetPoliciesRequest{}
	policy := &api.Policy{Name: exportPolicyName}
	for _, peer := range slices.SortedFunc(maps.Keys(e), netip.Addr.Compare) {
		neighbors := "svcnet-peer-" + peer.String()
		req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: neighbors,
			List: []string{netip.PrefixFrom(peer, peer.BitLen()).String()}})
		for _, v4 := range []bool{true, false} {
			var prefixes []*api.Prefix
			for _, a := range e[peer] {
				if a.Addr().Is4() == v4 {
					prefixes = append(prefixes, &api.Prefix{IpPrefix: a.String(), MaskLengthMin: uint32(a.Bits()), MaskLengthMax: uint32(a.Bits())})
				}
			}
			if len(prefixes) == 0 {
				continue // a prefix set has one family, and an empty one none
			}
			name := fmt.Sprintf("svcnet-to-%s-ipv%d", peer, map[bool]int{true: 4, false: 6}[v4])
			req.DefinedSets = append(req.DefinedSets, &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: name, Prefixes: prefixes})
			policy.Statements = append(policy.Statements, &api.Statement{Name: name,
				Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: neighbors},
					PrefixSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: name}},
				Actions: &api.Actions{RouteAction: api.RouteAction_ACCEPT}})
		}
		policy.Statements = append(policy.Statements, &api.Statement{Name: "svcnet-reject-" + peer.String(),
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: neighbors}},
			Actions:    &api.Actions{RouteAction: api.RouteAction_REJECT}})
	}
	req.Policies = []*api.Policy{policy}
	return req
}

// syncExportPolicy puts want in place when it differs from the policy in
// force, and tells whether it did: the peers that heard an address they
// may no longer hear then need a soft reset.
func (s *Speaker) syncExportPolicy(ctx context.Context, want exportPolicy) (bool, error) {
	if s.export != nil && s.export.equal(want) {
		return false, nil
	}
	if err := s.srv.SetPolicies(ctx, want.request()); err != nil {
		return false, fmt.Errorf("setting the export policy: %w", err)
	}
	if s.export == nil {
		if err := s.srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_EXPORT, Policies: []*api.Policy{{Name: exportPolicyName}},
			DefaultAction: api.RouteAction_ACCEPT}}); err != nil {
			return false, fmt.Errorf("assigning the export policy: %w", err)
		}
	}
	s.export = want
	return true, nil
}

// resendAll makes GoBGP send each established peer its paths again
// through the export policy (a soft reset out): what a peer may no
// longer hear is withdrawn from it, what it may now hear is sent.
func (s *Speaker) resendAll(ctx context.Context) {
	for addr := range s.peers {
		if err := s.srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Soft: true,
			Direction: api.ResetPeerRequest_OUT}); err != nil {
			s.cfg.Log.V(2).Info("Soft reset of a peer not established", "peer", addr, "err", err.Error())
		}
	}
}
