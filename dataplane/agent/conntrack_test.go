package agent

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestStaleUDPFlows(t *testing.T) {
	ep := netip.MustParseAddr("10.244.1.5")
	m := newStaleUDPFlows([]udpPort{{
		dests:     []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("192.168.240.1")},
		port:      53,
		nodePort:  30053,
		endpoints: map[netip.Addr]bool{ep: true},
	}}, []udpPort{{
		dests:     []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("192.168.240.1")},
		port:      53,
		nodePort:  30053,
		endpoints: map[netip.Addr]bool{netip.MustParseAddr("10.244.2.7"): true},
	}})
	flow := func(proto uint8, dst string, dport uint16, replySrc string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("172.30.0.100"), DstIP: net.ParseIP(dst), DstPort: dport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc)},
		}
	}
	for name, tc := range map[string]struct {
		flow *netlink.ConntrackFlow
		want bool
	}{
		"to the cluster IP, answered by the gone endpoint": {flow(unix.IPPROTO_UDP, "10.96.0.10", 53, "10.244.1.5"), true},
		"to the LoadBalancer IP":                           {flow(unix.IPPROTO_UDP, "192.168.240.1", 53, "10.244.1.5"), true},
		"to the node port on a node address":               {flow(unix.IPPROTO_UDP, "172.30.0.11", 30053, "10.244.1.5"), true},
		"answered by an endpoint that stays":               {flow(unix.IPPROTO_UDP, "10.96.0.10", 53, "10.244.2.7"), false},
		"TCP to the same addresses":                        {flow(unix.IPPROTO_TCP, "10.96.0.10", 53, "10.244.1.5"), false},
		"another service address":                          {flow(unix.IPPROTO_UDP, "10.96.0.11", 53, "10.244.1.5"), false},
		"another node port":                                {flow(unix.IPPROTO_UDP, "172.30.0.11", 30054, "10.244.1.5"), false},
		"to the service, never DNATed":                     {flow(unix.IPPROTO_UDP, "10.96.0.10", 53, "10.96.0.10"), true},
		"to the service, DNATed to an unknown endpoint":    {flow(unix.IPPROTO_UDP, "192.168.240.1", 53, "10.244.9.9"), true},
		"to another port of the service address":           {flow(unix.IPPROTO_UDP, "10.96.0.10", 5353, "10.96.0.10"), false},
		"to a node port, answered by an unknown address":   {flow(unix.IPPROTO_UDP, "172.30.0.11", 30053, "10.244.9.9"), false},
	} {
		if got := m.MatchConntrackFlow(tc.flow); got != tc.want {
			t.Errorf("%s: matched %t, want %t", name, got, tc.want)
		}
	}
}
