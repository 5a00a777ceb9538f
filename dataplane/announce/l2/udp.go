// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// udpOverhead is the most an IP and a UDP header take of the MTU: a
// heartbeat's datagrams are cut to fit the link unfragmented.
const udpOverhead = 40 + 8

// listenUDP opens the UDP path's socket on port, bound to iface so that
// it hears only what arrives on the segment's interface and sends only
// through it. Segments on other interfaces bind the same port on theirs.
// The caller is inside the segment's network namespace.
func listenUDP(iface string, port int) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, iface)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// onLinkPrefixes are the prefixes of iface's global addresses: the
// peers reachable on the segment without a router.
func onLinkPrefixes(h *netlink.Handle, link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || !ip.Unmap().IsGlobalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones).Masked())
	}
	return out, nil
}

// udpPeers are the addresses the UDP path sends heartbeats to: those of
// peers (node -> its InternalIPs) that lie in one of the segment's
// on-link prefixes. A peer behind a router is on another segment: it
// answers for its own segment, and hearing it here would make the two
// segments elect one answerer between them. Sorted, self left out.
func udpPeers(self string, peers map[string][]netip.Addr, onLink []netip.Prefix) []peerAddr {
	var out []peerAddr
	for node, addrs := range peers {
		if node == self {
			continue
		}
		for _, a := range addrs {
			a = a.Unmap()
			if slices.ContainsFunc(onLink, func(p netip.Prefix) bool { return p.Contains(a) }) {
				out = append(out, peerAddr{node: node, addr: a})
			}
		}
	}
	slices.SortFunc(out, func(x, y peerAddr) int { return x.addr.Compare(y.addr) })
	return out
}

// peerAddr is one address of a peer on the UDP path.
type peerAddr struct {
	node string
	addr netip.Addr
}

// fromPeer tells whether a heartbeat of node may come from src on the UDP
// path: only from that node's own address on the segment, so that nobody
// off the segment speaks for a node by sending to the port.
func fromPeer(peers []peerAddr, src netip.Addr, node string) bool {
	return slices.Contains(peers, peerAddr{node: node, addr: src.Unmap()})
}

// readUDP passes the UDP path's datagrams to Run until the socket closes.
func (s *Segment) readUDP() {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.cfg.Log.Error(err, "Reading the UDP liveness path failed", "interface", s.cfg.Interface)
			}
			return
		}
		src := from.Addr().Unmap()
		s.hbCh <- received{key: "udp " + src.String(), src: src, viaUDP: true, frame: append([]byte(nil), buf[:n]...)}
	}
}

// sendUDP sends h's datagrams to every peer address of the segment.
func (s *Segment) sendUDP(h *Heartbeat) {
	if s.udp == nil || len(s.udpPeers) == 0 {
		return
	}
	grams, err := h.encode(s.ifi.MTU - udpOverhead)
	if err != nil {
		s.cfg.Log.Error(err, "Encoding heartbeat")
		return
	}
	for _, p := range s.udpPeers {
		to := netip.AddrPortFrom(p.addr, uint16(s.cfg.LivenessPort))
		for _, g := range grams {
			if _, err := s.udp.WriteToUDPAddrPort(g, to); err != nil {
				s.cfg.Log.V(4).Info("Sending heartbeat by UDP failed", "interface", s.cfg.Interface, "peer", p.node, "to", to, "err", err)
				break
			}
		}
	}
}
