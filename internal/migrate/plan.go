// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package migrate reads a live cluster and says what moving it to svcnet
// would change, before anything changes: `svcnet migrate plan`
// (docs/operations.md). It never writes to the cluster.
package migrate

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
)

// Severity says how much a finding matters to the move.
type Severity string

// The severities, most pressing first.
const (
	// Blocker: the move would break something (a Service would lose its
	// address, the agent would refuse kube-proxy's settings) unless it is
	// dealt with first.
	Blocker Severity = "blocker"
	// Change: a step to take, or something svcnet does otherwise.
	Change Severity = "change"
	// Note: what the plan found, for the record.
	Note Severity = "note"
)

func (s Severity) rank() int { return slices.Index([]Severity{Blocker, Change, Note}, s) }

// Finding is one thing the plan says.
type Finding struct {
	// Area is the part of the cluster: kube-proxy, nodes,
	// kube-controller-manager, loadbalancer, metallb.
	Area     string   `json:"area"`
	Severity Severity `json:"severity"`
	// Object is kind/namespace/name, or kind/name, when one object is
	// concerned.
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
}

// Report is every finding, blockers first.
type Report struct {
	Findings []Finding `json:"findings"`
}

// Blockers counts the blockers.
func (r *Report) Blockers() int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == Blocker {
			n++
		}
	}
	return n
}

func (r *Report) add(area string, sev Severity, object, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{Area: area, Severity: sev, Object: object, Message: fmt.Sprintf(format, args...)})
}

// Areas of the findings, in the order a move goes.
const (
	AreaKubeProxy         = "kube-proxy"
	AreaNodes             = "nodes"
	AreaControllerManager = "kube-controller-manager"
	AreaLoadBalancer      = "loadbalancer"
	AreaMetalLB           = "metallb"
)

var areaOrder = []string{AreaKubeProxy, AreaNodes, AreaControllerManager, AreaLoadBalancer, AreaMetalLB}

// Plan reads the cluster through c and reports. A part it cannot read
// (no permission, a kind the cluster does not serve) is a finding of its
// own, not an error: the rest of the report still holds.
func Plan(ctx context.Context, c client.Reader) (*Report, error) {
	r := &Report{}
	s, err := load(ctx, c, r)
	if err != nil {
		return nil, err
	}
	for _, check := range []func(context.Context, client.Reader, *snapshot, *Report) error{
		checkKubeProxy, checkNodes, checkControllerManager,
	} {
		if err := check(ctx, c, s, r); err != nil {
			return nil, err
		}
	}
	objs, err := metallb.List(ctx, c)
	switch {
	case unreadable(err):
		r.add(AreaMetalLB, Note, "", "could not read MetalLB's configuration: %v", err)
	case err != nil:
		return nil, err
	}
	converted, err := metallb.Convert(objs)
	if err != nil {
		return nil, fmt.Errorf("converting MetalLB's configuration: %w", err)
	}
	reportMetalLB(objs, converted, r)
	if err := checkLoadBalancers(ctx, c, converted.Pools, r); err != nil {
		return nil, err
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Severity.rank(), b.Severity.rank()),
			cmp.Compare(slices.Index(areaOrder, a.Area), slices.Index(areaOrder, b.Area)))
	})
	return r, nil
}
