// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nfacct

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The nfnetlink_acct messages and attributes
// (include/uapi/linux/netfilter/nfnetlink_acct.h).
const (
	msgNew uint8 = 0 // NFNL_MSG_ACCT_NEW: create; also the type of a counter in a reply
	msgGet uint8 = 1 // NFNL_MSG_ACCT_GET

	attrName    uint16 = 1 // NFACCT_NAME: NUL-terminated string
	attrPackets uint16 = 2 // NFACCT_PKTS: big-endian u64
	attrBytes   uint16 = 3 // NFACCT_BYTES: big-endian u64
)

// nfgenmsgLen is the size of struct nfgenmsg, which starts the payload of
// every nfnetlink message.
const nfgenmsgLen = 4

// msgType is the netlink message type of an nfacct command: the
// subsystem in the high byte.
func msgType(cmd uint8) uint16 { return unix.NFNL_SUBSYS_ACCT<<8 | uint16(cmd) }

// encodeRequest is one netlink message: header, nfgenmsg (no family,
// version 0, resource 0) and the counter's name.
func encodeRequest(cmd uint8, flags uint16, seq uint32, name string) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.String(attrName, name)
	attrs, err := ae.Encode()
	if err != nil {
		// Only a name longer than an attribute can hold fails, and
		// checkName allows 31 bytes.
		panic(fmt.Sprintf("encoding nfacct name %q: %v", name, err))
	}
	n := unix.SizeofNlMsghdr + nfgenmsgLen + len(attrs)
	b := make([]byte, unix.SizeofNlMsghdr, n)
	binary.NativeEndian.PutUint32(b[0:4], uint32(n))
	binary.NativeEndian.PutUint16(b[4:6], msgType(cmd))
	binary.NativeEndian.PutUint16(b[6:8], flags)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	// b[12:16], the port ID, stays 0: the kernel's.
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0)
	return append(b, attrs...)
}

// decodeCounter reads a counter from the payload of a reply; attributes
// it does not know (the use count, flags, quota) are skipped.
func decodeCounter(data []byte) (Counter, error) {
	if len(data) < nfgenmsgLen {
		return Counter{}, fmt.Errorf("nfacct reply of %d bytes has no nfgenmsg", len(data))
	}
	ad, err := netlink.NewAttributeDecoder(data[nfgenmsgLen:])
	if err != nil {
		return Counter{}, fmt.Errorf("nfacct reply: %w", err)
	}
	ad.ByteOrder = binary.BigEndian
	var c Counter
	var seen [attrBytes + 1]bool
	for ad.Next() {
		switch ad.Type() {
		case attrName:
			c.Name = ad.String()
		case attrPackets:
			c.Packets = ad.Uint64()
		case attrBytes:
			c.Bytes = ad.Uint64()
		default:
			continue
		}
		seen[ad.Type()] = true
	}
	if err := ad.Err(); err != nil {
		return Counter{}, fmt.Errorf("nfacct reply: %w", err)
	}
	for _, a := range []uint16{attrName, attrPackets, attrBytes} {
		if !seen[a] {
			return Counter{}, fmt.Errorf("nfacct reply lacks attribute %d (name, packets, bytes are 1, 2, 3)", a)
		}
	}
	return c, nil
}

// errShortAck is a NLMSG_ERROR message too short to hold its errno.
var errShortAck = errors.New("netlink error message without an error number")

// ackOf tells whether m ends an exchange: an acknowledgement (done, nil),
// a refusal (done, its errno), or the end of a dump; other messages are
// replies (false, nil).
func ackOf(m syscall.NetlinkMessage) (done bool, err error) {
	switch m.Header.Type {
	case unix.NLMSG_ERROR:
		if len(m.Data) < 4 {
			return true, errShortAck
		}
		if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
			return true, syscall.Errno(-errno)
		}
		return true, nil
	case unix.NLMSG_DONE:
		return true, nil
	}
	return false, nil
}
