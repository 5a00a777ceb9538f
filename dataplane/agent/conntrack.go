// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// forgetUDP queues the UDP endpoints that a Service's old state had and
// its new state (nil when the Service is gone) no longer has.
func (a *Agent) forgetUDP(old, cur *serviceState) {
	for key, o := range old.udp {
		var now map[netip.AddrPort]bool
		if cur != nil {
			now = cur.udp[key].endpoints
		}
		gone := udpPort{dests: o.dests, port: o.port, nodePort: o.nodePort, endpoints: map[netip.AddrPort]bool{}}
		for ep := range o.endpoints {
			if !now[ep] {
				gone.endpoints[ep] = true
			}
		}
		if len(gone.endpoints) > 0 {
			a.staleUDP = append(a.staleUDP, gone)
		}
	}
}

// conntrackFamilies maps the IP families to the kernel's.
var conntrackFamilies = map[corev1.IPFamily]netlink.InetFamily{
	corev1.IPv4Protocol: unix.AF_INET,
	corev1.IPv6Protocol: unix.AF_INET6,
}

// clearStaleUDP reconciles the UDP conntrack entries with the rules, as
// kube-proxy's conntrack reconciler does: a flow to a UDP service port (a
// service address and port, or a node port) whose reply does not come
// from one of the port's serving endpoints (address and target port) is
// deleted. Without this, a client reusing its source port keeps talking
// to a gone Pod, to a port its Pod no longer serves on, or, for a flow
// that began before the Service's rules existed, to nothing. Beyond
// kube-proxy, the flows of a deleted Service to its former endpoints go
// too. TCP needs nothing: its connections fail and are retried. The
// entries go over netlink, in one table dump per family, after a sync
// that touched a UDP service port.
func (a *Agent) clearStaleUDP() {
	if len(a.staleUDP) == 0 && !a.udpChanged {
		return
	}
	match := newStaleUDPFlows(a.staleUDP, a.currentUDP())
	a.staleUDP, a.udpChanged = nil, false
	for _, b := range a.backends {
		family := b.Family()
		start := time.Now()
		var n uint
		err := netns.Do(a.cfg.NetNS, func() error {
			var err error
			n, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, conntrackFamilies[family], match)
			return err
		})
		metricConntrackReconcileDuration.WithLabelValues(string(family)).Observe(time.Since(start).Seconds())
		metricConntrackDeleted.WithLabelValues(string(family)).Add(float64(n))
		if err != nil {
			a.log.Error(err, "Clearing stale UDP conntrack entries failed", "ipFamily", family, "deleted", n)
			continue
		}
		a.log.V(4).Info("Finished reconciling conntrack entries", "ipFamily", family, "deleted", n, "took", time.Since(start))
	}
}

// currentUDP lists the UDP service ports the rules now program.
func (a *Agent) currentUDP() []udpPort {
	var out []udpPort
	for _, k := range a.order {
		for _, u := range a.services[k].udp {
			out = append(out, u)
		}
	}
	return out
}

// staleUDPFlows matches the conntrack entries clearStaleUDP deletes.
type staleUDPFlows struct {
	// gone holds (service address and port, removed endpoint) pairs, and
	// goneNodePort (node port, removed endpoint) pairs: they catch the
	// flows of Services deleted since the last cleanup.
	gone         map[[2]netip.AddrPort]bool
	goneNodePort map[nodePortEndpoint]bool
	// current maps each programmed service address and port to its
	// serving endpoints; currentNodePort each node port, while it has
	// serving endpoints (a node port is matched by number alone, so one
	// without endpoints would catch every UDP flow to that port).
	current         map[netip.AddrPort]map[netip.AddrPort]bool
	currentNodePort map[uint16]map[netip.AddrPort]bool
}

type nodePortEndpoint struct {
	port     uint16
	endpoint netip.AddrPort
}

var _ netlink.CustomConntrackFilter = staleUDPFlows{}

func newStaleUDPFlows(stale, current []udpPort) staleUDPFlows {
	m := staleUDPFlows{
		gone: map[[2]netip.AddrPort]bool{}, goneNodePort: map[nodePortEndpoint]bool{},
		current: map[netip.AddrPort]map[netip.AddrPort]bool{}, currentNodePort: map[uint16]map[netip.AddrPort]bool{},
	}
	for _, u := range stale {
		for ep := range u.endpoints {
			for _, dst := range u.dests {
				m.gone[[2]netip.AddrPort{netip.AddrPortFrom(dst, uint16(u.port)), ep}] = true
			}
			if u.nodePort != 0 {
				m.goneNodePort[nodePortEndpoint{uint16(u.nodePort), ep}] = true
			}
		}
	}
	for _, u := range current {
		for _, dst := range u.dests {
			m.current[netip.AddrPortFrom(dst, uint16(u.port))] = u.endpoints
		}
		if u.nodePort != 0 && len(u.endpoints) > 0 {
			m.currentNodePort[uint16(u.nodePort)] = u.endpoints
		}
	}
	return m
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (m staleUDPFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	replySrcIP, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok {
		return false
	}
	dstIP, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok {
		return false
	}
	replySrc := netip.AddrPortFrom(replySrcIP.Unmap(), flow.Reverse.SrcPort)
	dst := netip.AddrPortFrom(dstIP.Unmap(), flow.Forward.DstPort)
	if m.gone[[2]netip.AddrPort{dst, replySrc}] || m.goneNodePort[nodePortEndpoint{dst.Port(), replySrc}] {
		return true
	}
	if endpoints, programmed := m.current[dst]; programmed {
		return !endpoints[replySrc]
	}
	if endpoints, programmed := m.currentNodePort[dst.Port()]; programmed {
		return !endpoints[replySrc]
	}
	return false
}
