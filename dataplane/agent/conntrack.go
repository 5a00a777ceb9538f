package agent

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// forgetUDP queues the UDP endpoints that a Service's old state had and
// its new state (nil when the Service is gone) no longer has.
func (a *Agent) forgetUDP(old, cur *serviceState) {
	for key, o := range old.udp {
		var now map[netip.Addr]bool
		if cur != nil {
			now = cur.udp[key].endpoints
		}
		gone := udpPort{dests: o.dests, nodePort: o.nodePort, endpoints: map[netip.Addr]bool{}}
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

// clearStaleUDP deletes the conntrack entries that still send UDP traffic
// of a service port somewhere its rules no longer do; without this, a
// client reusing its source port keeps talking to a gone Pod, or, for a
// flow that began before the Service's rules existed, to nothing. Two
// kinds go, as with kube-proxy: flows DNATed to an endpoint a render
// removed (to a service address or a node port), and flows to a service
// address and port whose reply does not come from one of the port's
// current endpoints (not DNATed, or DNATed to an endpoint gone while the
// agent was down). TCP needs nothing: its connections fail and are
// retried. The entries go over netlink in one table dump per family
// instead of one conntrack process per entry, and only after a sync that
// touched a UDP service port.
func (a *Agent) clearStaleUDP() {
	if len(a.staleUDP) == 0 && !a.udpChanged {
		return
	}
	match := newStaleUDPFlows(a.staleUDP, a.currentUDP())
	a.staleUDP, a.udpChanged = nil, false
	err := netns.Do(a.cfg.NetNS, func() error {
		for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, match)
			if err != nil {
				return err
			}
			if n > 0 {
				a.log.V(2).Info("Cleared stale UDP conntrack entries", "count", n)
			}
		}
		return nil
	})
	if err != nil {
		a.log.V(2).Info("Clearing conntrack entries failed", "err", err.Error())
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
	// byDest holds (service address, removed endpoint) pairs.
	byDest map[[2]netip.Addr]bool
	// byNodePort holds (node port, removed endpoint) pairs.
	byNodePort map[nodePortEndpoint]bool
	// current maps each programmed service address and port to the
	// endpoints its rules send traffic to.
	current map[netip.AddrPort]map[netip.Addr]bool
}

type nodePortEndpoint struct {
	port     uint16
	endpoint netip.Addr
}

var _ netlink.CustomConntrackFilter = staleUDPFlows{}

func newStaleUDPFlows(stale, current []udpPort) staleUDPFlows {
	m := staleUDPFlows{byDest: map[[2]netip.Addr]bool{}, byNodePort: map[nodePortEndpoint]bool{}, current: map[netip.AddrPort]map[netip.Addr]bool{}}
	for _, u := range stale {
		for ep := range u.endpoints {
			for _, dst := range u.dests {
				m.byDest[[2]netip.Addr{dst, ep}] = true
			}
			if u.nodePort != 0 {
				m.byNodePort[nodePortEndpoint{uint16(u.nodePort), ep}] = true
			}
		}
	}
	for _, u := range current {
		for _, dst := range u.dests {
			m.current[netip.AddrPortFrom(dst, uint16(u.port))] = u.endpoints
		}
	}
	return m
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (m staleUDPFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	replySrc, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok {
		return false
	}
	replySrc = replySrc.Unmap()
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok {
		return false
	}
	dst = dst.Unmap()
	if m.byDest[[2]netip.Addr{dst, replySrc}] || m.byNodePort[nodePortEndpoint{flow.Forward.DstPort, replySrc}] {
		return true
	}
	endpoints, programmed := m.current[netip.AddrPortFrom(dst, flow.Forward.DstPort)]
	return programmed && !endpoints[replySrc]
}
