// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	etherTypeIPv6   = 0x86DD
	ipv6HeaderLen   = 40
	protoICMPv6     = 58
	typeNeighborSol = 135
)

var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}
	zeroMAC     = net.HardwareAddr{0, 0, 0, 0, 0, 0}
)

// listenNDP opens a packet socket that sees every Neighbor Solicitation
// arriving on ifi, multicast (address resolution) and unicast (a
// neighbour's reachability probe, which the kernel would drop as not for
// it before an ICMPv6 socket saw it), and makes the interface accept all
// multicast, so that a NIC's filter never hides a solicited-node group.
func listenNDP(ifi *net.Interface) (*packet.Conn, error) {
	filter, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 6, Size: 1}, // IPv6 next header
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 3},
		bpf.LoadAbsolute{Off: ipv6HeaderLen, Size: 1}, // ICMPv6 type
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: typeNeighborSol, SkipTrue: 1},
		bpf.RetConstant{Val: 1 << 16},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		return nil, err
	}
	c, err := packet.Listen(ifi, packet.Datagram, etherTypeIPv6, &packet.Config{Filter: filter})
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	var sockErr error
	err = rc.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptPacketMreq(int(fd), unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP,
			&unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_ALLMULTI})
	})
	if err = errors.Join(err, sockErr); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// serveARP answers ARP requests for the owned addresses.
func (s *Segment) serveARP() {
	buf := make([]byte, 1500)
	for {
		n, _, err := s.arp.ReadFrom(buf)
		if err != nil {
			return
		}
		var req arp.Packet
		if err := req.UnmarshalBinary(buf[:n]); err != nil || req.Operation != arp.OperationRequest {
			continue
		}
		if bytes.Equal(req.SenderHardwareAddr, s.ifi.HardwareAddr) || !s.owns(req.TargetIP) {
			continue
		}
		reply, err := arp.NewPacket(arp.OperationReply, s.ifi.HardwareAddr, req.TargetIP, req.SenderHardwareAddr, req.SenderIP)
		if err != nil {
			continue
		}
		s.sendARP(reply, req.SenderHardwareAddr)
	}
}

func (s *Segment) sendARP(p *arp.Packet, to net.HardwareAddr) {
	b, err := p.MarshalBinary()
	if err != nil {
		return
	}
	if _, err := s.arp.WriteTo(b, &packet.Addr{HardwareAddr: to}); err != nil {
		s.cfg.Log.V(4).Info("Sending ARP failed", "interface", s.cfg.Interface, "err", err)
	}
}

// serveNDP answers Neighbor Solicitations for the owned addresses.
func (s *Segment) serveNDP() {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := s.ndp.ReadFrom(buf)
		if err != nil {
			return
		}
		b := buf[:n]
		if n < ipv6HeaderLen || b[6] != protoICMPv6 {
			continue
		}
		src := netip.AddrFrom16([16]byte(b[8:24]))
		m, err := ndp.ParseMessage(b[ipv6HeaderLen:])
		if err != nil {
			continue
		}
		ns, ok := m.(*ndp.NeighborSolicitation)
		hw, _ := from.(*packet.Addr)
		if !ok || hw == nil || bytes.Equal(hw.HardwareAddr, s.ifi.HardwareAddr) || !s.owns(ns.TargetAddress) {
			continue
		}
		na := &ndp.NeighborAdvertisement{Solicited: true, Override: true, TargetAddress: ns.TargetAddress,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: s.ifi.HardwareAddr}}}
		dst, dstHW := src, hw.HardwareAddr
		if src.IsUnspecified() { // duplicate address detection: answer to all nodes
			na.Solicited, dst, dstHW = false, allNodes, allNodesMAC
		}
		s.sendNA(na, dst, dstHW)
	}
}

// sendNA sends a Neighbor Advertisement from its target address.
func (s *Segment) sendNA(na *ndp.NeighborAdvertisement, dst netip.Addr, dstHW net.HardwareAddr) {
	src := na.TargetAddress
	body, err := ndp.MarshalMessageChecksum(na, src, dst)
	if err != nil {
		return
	}
	pkt := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:], uint16(len(body)))
	pkt[6], pkt[7] = protoICMPv6, ndp.HopLimit
	copy(pkt[8:24], src.AsSlice())
	copy(pkt[24:40], dst.AsSlice())
	pkt = append(pkt, body...)
	if _, err := s.ndp.WriteTo(pkt, &packet.Addr{HardwareAddr: dstHW}); err != nil {
		s.cfg.Log.V(4).Info("Sending NA failed", "interface", s.cfg.Interface, "err", err)
	}
}

// announce tells the segment that this node now answers for a: a
// gratuitous ARP request (sender and target both a), or an unsolicited
// Neighbor Advertisement with the Override flag. Linux hosts replace a
// cached entry on either.
func (s *Segment) announce(a netip.Addr) {
	if a.Is4() {
		garp, err := arp.NewPacket(arp.OperationRequest, s.ifi.HardwareAddr, a, zeroMAC, a)
		if err == nil {
			s.sendARP(garp, ethernet.Broadcast)
		}
		return
	}
	s.sendNA(&ndp.NeighborAdvertisement{Override: true, TargetAddress: a,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: s.ifi.HardwareAddr}}}, allNodes, allNodesMAC)
}
