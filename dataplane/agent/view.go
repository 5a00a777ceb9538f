// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/nodeview"
)

// viewTimeout is how long a view waits for the sync loop, which answers
// between syncs.
const viewTimeout = 5 * time.Second

// errLoopBusy: the sync loop did not answer in time.
var errLoopBusy = errors.New("the agent's sync loop did not answer")

// viewQuery asks the sync loop, which owns the rendered state, what it
// rendered a Service from.
type viewQuery struct {
	key   types.NamespacedName
	reply chan loopRecord
}

// loopRecord is the sync loop's answer: the inputs (inputsOf) the
// Service's rules were rendered from, "" when it has none, and whether
// the node is on standby for kube-proxy.
type loopRecord struct {
	inputs  string
	standby bool
}

// answer answers a view query, from the sync loop.
func (a *Agent) answer(q viewQuery) {
	rec := loopRecord{standby: a.handover.standby}
	if st := a.services[q.key]; st != nil {
		rec.inputs = st.inputs
	}
	q.reply <- rec
}

// askLoop asks the sync loop for its record of key.
func (a *Agent) askLoop(ctx context.Context, key types.NamespacedName) (loopRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, viewTimeout)
	defer cancel()
	q := viewQuery{key: key, reply: make(chan loopRecord, 1)}
	select {
	case a.views <- q:
	case <-ctx.Done():
		return loopRecord{}, fmt.Errorf("%w within %s: a sync has run longer, or the loop is stuck", errLoopBusy, viewTimeout)
	}
	select {
	case rec := <-q.reply:
		return rec, nil
	case <-ctx.Done():
		return loopRecord{}, fmt.Errorf("%w within %s", errLoopBusy, viewTimeout)
	}
}

// ServiceView is what this node's rules hold for key: the ports of every
// family with the endpoints each sends to, from the objects the agent's
// cache holds, whether the rules were rendered from those very objects,
// and the state of the node's syncs.
func (a *Agent) ServiceView(ctx context.Context, key types.NamespacedName) (nodeview.Service, error) {
	v := nodeview.Service{Node: a.cfg.NodeName, Mode: a.cfg.Mode, Service: key.String(), Sync: a.syncView()}
	rec, err := a.askLoop(ctx, key)
	if err != nil {
		return v, err
	}
	v.Standby, v.Rendered, v.RenderedFrom = rec.standby, rec.inputs != "", rec.inputs
	svc, endpointSlices, err := a.readService(ctx, key)
	if err != nil {
		return v, fmt.Errorf("reading %s from the agent's cache: %w", key, err)
	}
	if svc == nil {
		v.UpToDate = !v.Rendered
		return v, nil
	}
	node, err := a.nodeModel(ctx)
	if err != nil {
		return v, err
	}
	v.Exists, v.CacheHolds = true, inputsOf(node, svc, endpointSlices)
	v.UpToDate = v.RenderedFrom == v.CacheHolds
	for _, b := range a.backends {
		for _, p := range model.BuildService(b.Family(), node, svc, endpointSlices, model.Options{ProxyName: a.cfg.ProxyName}) {
			v.Ports = append(v.Ports, portView(p, string(b.Family())))
		}
	}
	return v, nil
}

func (a *Agent) syncView() nodeview.Sync {
	h := a.Health()
	a.mu.Lock()
	synced := a.lastSuccess
	a.mu.Unlock()
	return nodeview.Sync{Healthy: h.Healthy, LastSynced: synced, OldestQueuedChange: h.OldestQueuedChange, Error: h.Error, Now: h.CurrentTime}
}

func portView(p *model.ServicePort, family string) nodeview.Port {
	v := nodeview.Port{
		Family: family, Name: p.Name, Protocol: string(p.Protocol), Port: p.Port, NodePort: p.NodePort,
		AffinitySeconds: p.AffinitySeconds, InternalPolicyLocal: p.InternalPolicyLocal, ExternalPolicyLocal: p.ExternalPolicyLocal,
		HealthCheckNodePort: p.HealthCheckNodePort, HasEndpoints: p.HasEndpoints,
		Internal: endpointViews(p.InternalEndpoints()),
	}
	if p.ClusterIP.IsValid() {
		v.ClusterIP = p.ClusterIP.String()
	}
	for _, ip := range p.ExternalIPs {
		v.ExternalIPs = append(v.ExternalIPs, ip.String())
	}
	for _, ip := range p.LoadBalancerIPs {
		v.LoadBalancerIPs = append(v.LoadBalancerIPs, ip.String())
	}
	for _, r := range p.LoadBalancerSources {
		v.SourceRanges = append(v.SourceRanges, r.String())
	}
	if p.ExternallyAccessible() {
		v.External = endpointViews(p.ExternalEndpoints())
	}
	return v
}

func endpointViews(eps []model.Endpoint) []nodeview.Endpoint {
	out := make([]nodeview.Endpoint, 0, len(eps))
	for _, e := range eps {
		out = append(out, nodeview.Endpoint{Address: e.String(), Local: e.Local, Ready: e.Ready})
	}
	return out
}
