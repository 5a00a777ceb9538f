// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// LabelNodeProxy is the Node label that says which proxy programs the
// node's Services while a cluster moves between kube-proxy and svcnet,
// one node at a time (docs/operations.md, "Moving from kube-proxy"):
// NodeProxyKubeProxy keeps the agent on standby; any other value, or none, gives the node to
// the agent. kube-proxy's DaemonSet selects the same label, so that one
// `kubectl label node` moves a node either way.
const LabelNodeProxy = "svcnet.io/proxy"

// NodeProxyKubeProxy is LabelNodeProxy's value for a node kube-proxy
// programs.
const NodeProxyKubeProxy = "kube-proxy"

// leftoverRecheck is how long after taking a node over the agent looks
// again for kube-proxy's rules: a kube-proxy Pod that was still ending
// when they were first removed (its termination grace period is 30
// seconds) may have written them once more.
const leftoverRecheck = time.Minute

// handover is the sync loop's state of the node's ownership.
type handover struct {
	// standby: the last sync found the Node labelled for kube-proxy and
	// wrote nothing.
	standby bool
	// handedBack are the families whose own rules the agent removed during
	// this standby, once kube-proxy's were in place.
	handedBack map[corev1.IPFamily]bool
	// variant is the node's iptables variant, detected once per standby
	// (detection runs both variants' iptables-save) for the hand-back's
	// look at kube-proxy's chains, which polls every second.
	variant *iptables.Variant
	// leftoversDue: kube-proxy's rules (of every mode) are to be removed
	// after the next sync that applies the agent's, once kube-proxy has
	// left the node; passes counts the removals since the takeover.
	leftoversDue bool
	passes       int
	// recheckAt is when the second look for kube-proxy's rules is due.
	recheckAt time.Time
}

// kubeProxyOwns tells whether the Node is labelled for kube-proxy.
func kubeProxyOwns(n *corev1.Node) bool {
	return n.Labels[LabelNodeProxy] == NodeProxyKubeProxy
}

// standBy is a sync on a node labelled for kube-proxy: the Services are
// rendered (so that a takeover applies at once) but nothing is written;
// the health check node ports are left to kube-proxy, and svcnet's own
// rules go once kube-proxy's serve the node (handBack).
func (a *Agent) standBy(ctx context.Context) {
	if !a.handover.standby {
		a.log.Info("The Node is labelled for kube-proxy: standing by, writing no rules", "label", LabelNodeProxy+"="+NodeProxyKubeProxy)
		a.handover.standby = true
		a.handover.handedBack = map[corev1.IPFamily]bool{}
		a.handover.variant = nil
		a.handover.leftoversDue = false
		a.health.closeAll()
	}
	if !a.handBack(ctx) {
		a.triggerAfter(ctx, handBackPoll)
	}
	now := a.clock.Now()
	a.mu.Lock()
	a.lastSuccess, a.failure, a.syncingQueuedAt = now, nil, familyTimes{}
	a.markUpdatedLocked(now, a.families())
	a.mu.Unlock()
}

// takeOver ends a standby: the backends rewrite everything (kube-proxy
// changed the kernel meanwhile) and kube-proxy's rules go once the
// agent's serve.
func (a *Agent) takeOver() {
	if !a.handover.standby {
		return
	}
	a.log.Info("The Node is no longer labelled for kube-proxy: taking its rules over")
	a.handover.standby = false
	for _, b := range a.backends {
		b.ForceFull()
	}
	a.handover.leftoversDue, a.handover.passes = a.cfg.ProxyName == "", 0
}

// handBackPoll is how often a standing-by agent looks whether kube-proxy's
// rules serve the node yet.
const handBackPoll = time.Second

// handBack removes, family by family, the agent's own nftables table once
// kube-proxy's rules hold the node's Services: before that, the table
// keeps serving them. In iptables mode the agent's chains are
// kube-proxy's, which kube-proxy rewrites in place (iptables mode) or
// removes when it starts (nftables mode). It tells whether every family
// is handed back.
func (a *Agent) handBack(ctx context.Context) bool {
	if a.cfg.Mode != ModeNFTables {
		return true
	}
	all := true
	for _, b := range a.backends {
		f := b.Family()
		if a.handover.handedBack[f] {
			continue
		}
		why := "kube-proxy's rules serve the node"
		probe, ok := a.probeAddress(ctx, f)
		if !ok {
			why = "no kubernetes Service of the family to serve"
		} else {
			if a.handover.variant == nil {
				v := detectVariant(a.cfg, logr.Discard())
				a.handover.variant = &v
			}
			serving, err := kubeProxyServes(ctx, a.cfg, *a.handover.variant, f, probe)
			if err != nil {
				a.log.V(1).Info("Cannot tell yet whether kube-proxy's rules serve the node", "family", f, "err", err.Error())
			}
			if !serving {
				a.log.V(2).Info("kube-proxy's rules do not serve the node yet", "family", f, "probe", probe)
				all = false
				continue
			}
		}
		if err := b.Cleanup(ctx); err != nil {
			a.log.Error(err, "Removing svcnet's rules, retrying", "family", f, "why", why)
			all = false
			continue
		}
		a.handover.handedBack[f] = true
		a.log.Info("Handed the node back to kube-proxy: removed svcnet's rules", "family", f, "why", why)
	}
	return all
}

// triggerAfter asks for a sync after d, unless ctx ends first.
func (a *Agent) triggerAfter(ctx context.Context, d time.Duration) {
	after := a.clock.After(d)
	go func() {
		select {
		case <-ctx.Done():
		case <-after:
			a.Trigger()
		}
	}()
}

// probeAddress is a cluster IP whose rules show that kube-proxy has
// programmed the node: the kubernetes Service's of the family, which
// every cluster has. False when the family has none.
func (a *Agent) probeAddress(ctx context.Context, f corev1.IPFamily) (netip.Addr, bool) {
	var svc corev1.Service
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &svc); err != nil {
		return netip.Addr{}, false
	}
	for _, s := range svc.Spec.ClusterIPs {
		if ip, err := netip.ParseAddr(s); err == nil && ipfamily.Of(ip) == f {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// kubeProxyServes tells whether kube-proxy's rules of either mode know
// probe: its nftables table's cluster-ips set (every active cluster IP,
// with endpoints or not) holds it, or its iptables KUBE-SERVICES chain
// matches it, in nat (endpoints) or filter (none). Only asked in nftables
// mode, where the agent writes no KUBE- chain of its own.
func kubeProxyServes(ctx context.Context, cfg Config, variant iptables.Variant, f corev1.IPFamily, probe netip.Addr) (bool, error) {
	tables, err := nftables.Tables(f, cfg.NetNS)
	if err != nil {
		return false, err
	}
	if slices.Contains(tables, nftables.KubeProxyTableName) {
		nft, err := nftables.NewInterface(f, nftables.KubeProxyTableName, cfg.NetNS)
		if err != nil {
			return false, err
		}
		elems, err := nft.ListElements(ctx, "set", "cluster-ips")
		if err != nil && !knftables.IsNotFound(err) {
			return false, fmt.Errorf("kube-proxy's cluster-ips set: %w", err)
		}
		for _, e := range elems {
			if len(e.Key) > 0 && e.Key[0] == probe.String() {
				return true, nil
			}
		}
	}
	ipt := iptables.NewExecVariant(f, cfg.NetNS, variant)
	match := "-d " + netip.PrefixFrom(probe, probe.BitLen()).String() + " "
	for _, table := range []string{"nat", "filter"} {
		rules, _, err := ipt.ChainRules(ctx, table, iptables.ChainServices)
		if err != nil {
			return false, err
		}
		for _, r := range rules {
			if strings.Contains(r, match) {
				return true, nil
			}
		}
	}
	return false, nil
}

// afterApply runs after a sync that applied the agent's rules: kube-proxy's
// leftovers of every mode go once kube-proxy has left the node, which the
// health server's address tells (kube-proxy holds the same one until it
// ends), and once more leftoverRecheck later. With --proxy-name the node
// is shared and nothing of kube-proxy's is touched.
func (a *Agent) afterApply(ctx context.Context) {
	h := &a.handover
	if !h.leftoversDue || !a.kubeProxyGone() {
		return
	}
	h.leftoversDue = false
	h.passes++
	if a.removeLeftovers != nil {
		a.removeLeftovers(ctx)
	}
	if h.passes == 1 {
		h.recheckAt = a.clock.Now().Add(leftoverRecheck)
		a.triggerAfter(ctx, leftoverRecheck)
	}
}

// kubeProxyGone tells whether kube-proxy has left the node, as far as the
// agent can see: its health server holds kube-proxy's address (or has
// none to wait for).
func (a *Agent) kubeProxyGone() bool {
	return a.cfg.HealthzBindAddress == "0" || a.healthListening.Load()
}

// takeLeftoverRecheck folds a due recheck into the handover state.
func (a *Agent) takeLeftoverRecheck() {
	h := &a.handover
	if h.recheckAt.IsZero() || a.clock.Now().Before(h.recheckAt) {
		return
	}
	h.recheckAt = time.Time{}
	if !h.standby && a.cfg.ProxyName == "" {
		h.leftoversDue = true
	}
}
