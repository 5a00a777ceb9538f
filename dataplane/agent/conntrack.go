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
// of a service port to an endpoint that is no longer programmed; without
// this, a client reusing its source port keeps talking to a gone Pod.
// TCP needs nothing: its connections fail and are retried. The entries go
// over netlink in one table dump per family, as kube-proxy does, instead
// of one conntrack process per entry.
func (a *Agent) clearStaleUDP() {
	if len(a.staleUDP) == 0 {
		return
	}
	match := newStaleUDPFlows(a.staleUDP)
	a.staleUDP = nil
	err := netns.Do(a.opts.NetNS, func() error {
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

// staleUDPFlows matches the conntrack entries of UDP traffic that was
// DNATed to an endpoint no longer behind the service address or node port
// it was sent to.
type staleUDPFlows struct {
	// byDest holds (service address, endpoint) pairs.
	byDest map[[2]netip.Addr]bool
	// byNodePort holds (node port, endpoint) pairs.
	byNodePort map[nodePortEndpoint]bool
}

type nodePortEndpoint struct {
	port     uint16
	endpoint netip.Addr
}

var _ netlink.CustomConntrackFilter = staleUDPFlows{}

func newStaleUDPFlows(stale []udpPort) staleUDPFlows {
	m := staleUDPFlows{byDest: map[[2]netip.Addr]bool{}, byNodePort: map[nodePortEndpoint]bool{}}
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
	return m
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter: a UDP flow
// whose reply comes from the endpoint (the DNAT target) and whose original
// destination is one of the endpoint's old service addresses or node ports.
func (m staleUDPFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	endpoint, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok {
		return false
	}
	endpoint = endpoint.Unmap()
	if dst, ok := netip.AddrFromSlice(flow.Forward.DstIP); ok && m.byDest[[2]netip.Addr{dst.Unmap(), endpoint}] {
		return true
	}
	return m.byNodePort[nodePortEndpoint{flow.Forward.DstPort, endpoint}]
}
