// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"

	gnft "github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// field is one part of a data set's or map's elements, as the kernel
// stores it: every part padded to a multiple of 4 bytes (nftables'
// 32-bit registers), numbers in network byte order except the integer
// that numgen writes, in the host's.
type field uint8

const (
	// fieldAddr is an IPv4 or IPv6 address (ipv4_addr, ipv6_addr).
	fieldAddr field = iota + 1
	// fieldProto is a layer 4 protocol by name (inet_proto).
	fieldProto
	// fieldPort is a port (inet_service).
	fieldPort
	// fieldBucket is numgen's result (integer, host byte order).
	fieldBucket
	// fieldAddrRange is an address or a CIDR of an interval set: the key
	// holds its first address, the key end its last.
	fieldAddrRange
)

var protoNumbers = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP, "sctp": unix.IPPROTO_SCTP}

// encode turns an element's key or value, as the renderer writes it for
// nft ("10.96.0.1 . tcp . 80 . 3"), into the kernel's bytes; keyEnd is
// non-nil when a part is a range.
func encode(fam family, fields []field, text string) (key, keyEnd []byte, err error) {
	parts := strings.Split(text, " . ")
	if len(parts) != len(fields) {
		return nil, nil, fmt.Errorf("element %q has %d parts, its set %d", text, len(parts), len(fields))
	}
	var hasRange bool
	for i, f := range fields {
		first, last, isRange, err := encodePart(fam, f, parts[i])
		if err != nil {
			return nil, nil, fmt.Errorf("element %q: %w", text, err)
		}
		key, keyEnd = append(key, first...), append(keyEnd, last...)
		hasRange = hasRange || isRange
	}
	if !hasRange {
		keyEnd = nil
	}
	return key, keyEnd, nil
}

// encodePart is one part of an element in the kernel's bytes: first
// and last are equal except for an address range.
func encodePart(fam family, f field, part string) (first, last []byte, isRange bool, err error) {
	addrLen := 4
	if fam.nft == knftables.IPv6Family {
		addrLen = 16
	}
	switch f {
	case fieldAddr:
		a, err := netip.ParseAddr(part)
		if err != nil || a.BitLen() != addrLen*8 {
			return nil, nil, false, fmt.Errorf("%q is not an %s address", part, fam.ip)
		}
		return a.AsSlice(), a.AsSlice(), false, nil
	case fieldAddrRange:
		p, err := netip.ParsePrefix(part)
		if err != nil {
			a, aerr := netip.ParseAddr(part)
			if aerr != nil {
				return nil, nil, false, fmt.Errorf("%q is not an address or CIDR", part)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().BitLen() != addrLen*8 {
			return nil, nil, false, fmt.Errorf("%q is not an %s range", part, fam.ip)
		}
		lo, hi := rangeOf(p.Masked())
		return lo.AsSlice(), hi.AsSlice(), true, nil
	case fieldProto:
		n, ok := protoNumbers[part]
		if !ok {
			return nil, nil, false, fmt.Errorf("unknown protocol %q", part)
		}
		b := []byte{n, 0, 0, 0}
		return b, b, false, nil
	case fieldPort:
		p, err := strconv.ParseUint(part, 10, 16)
		if err != nil {
			return nil, nil, false, fmt.Errorf("%q is not a port", part)
		}
		b := append(binary.BigEndian.AppendUint16(nil, uint16(p)), 0, 0)
		return b, b, false, nil
	case fieldBucket:
		n, err := strconv.ParseUint(part, 10, 32)
		if err != nil {
			return nil, nil, false, fmt.Errorf("%q is not a bucket number", part)
		}
		b := binary.NativeEndian.AppendUint32(nil, uint32(n))
		return b, b, false, nil
	}
	return nil, nil, false, fmt.Errorf("part %q has no layout", part)
}

// rangeOf is the first and last address of a prefix.
func rangeOf(p netip.Prefix) (netip.Addr, netip.Addr) {
	first := p.Addr()
	b := first.AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	return first, last
}

// netlinkElements writes the elements of the table's data sets and maps
// over netlink through google/nftables, in the network namespace at
// netns: an endpoint change is a few element deletions and additions, a
// cold sync hundreds of thousands of additions, and neither needs nft
// to start, parse text and read the table first (docs/BENCHMARKS.md).
// The objects, their rules and the verdict maps' elements still go
// through knftables.
type netlinkElements struct {
	fam   family
	table *gnft.Table
	netns string
	// dial, in tests, replaces the kernel's netlink socket.
	dial nltest.Func
}

func newNetlinkElements(fam family, table, netnsPath string) *netlinkElements {
	t := &gnft.Table{Name: table, Family: gnft.TableFamilyIPv4}
	if fam.nft == knftables.IPv6Family {
		t.Family = gnft.TableFamilyIPv6
	}
	return &netlinkElements{fam: fam, table: t, netns: netnsPath}
}

// Limits of one netlink batch. A message's element list is one netlink
// attribute, whose length is 16 bits; a batch is sent with one sendmsg and
// the kernel acknowledges each message, so the socket's buffers are sized
// to the batch.
const maxMessageBytes = 60 << 10

// maxChunkBytes bounds a batch that need not be atomic (elements of a set
// that was empty before), to keep the agent's memory flat.
var maxChunkBytes = 4 << 20

// elementBatch collects element operations and sends them as one netlink
// transaction (commit): the kernel applies all of them or none.
type elementBatch struct {
	nl   *netlinkElements
	conn *gnft.Conn
	// bytes and messages of the batch so far, to size the socket.
	bytes, messages int
	// the message being filled: its set, whether it deletes, its elements.
	set      string
	deleting bool
	elems    []gnft.SetElement
	size     int
	err      error
}

func (nl *netlinkElements) batch() *elementBatch {
	b := &elementBatch{nl: nl}
	b.newConn()
	return b
}

func (b *elementBatch) newConn() {
	b.bytes, b.messages = 0, 0
	// The socket is opened by Flush, inside the namespace (commit).
	opt := gnft.WithSockOptions(func(c *netlink.Conn) error {
		return sizeSocket(c, b.bytes+(64<<10), b.messages*1024+(256<<10))
	})
	if b.nl.dial != nil {
		opt = gnft.WithTestDial(b.nl.dial)
	}
	conn, err := gnft.New(opt)
	b.conn = conn
	if b.err == nil {
		b.err = err
	}
}

// sizeSocket makes room for a batch of sndbuf bytes and its rcvbuf bytes
// of acknowledgements, beyond the system's default maximums (as nft does,
// with CAP_NET_ADMIN).
func sizeSocket(c *netlink.Conn, sndbuf, rcvbuf int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndbuf),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvbuf))
	})
	return errors.Join(err, serr)
}

// flushSet empties a set or map in the batch.
func (b *elementBatch) flushSet(name string) {
	b.endMessage()
	b.conn.FlushSet(&gnft.Set{Table: b.nl.table, Name: name})
	b.messages++
	b.bytes += 64 + len(name)
}

// add adds an element of o; value is ignored for a set.
func (b *elementBatch) add(o *object, key string, w wanted) {
	b.put(o, key, w, false)
}

// del deletes an element of o by its key.
func (b *elementBatch) del(o *object, key string) {
	b.put(o, key, wanted{}, true)
}

func (b *elementBatch) put(o *object, key string, w wanted, deleting bool) {
	if b.err != nil {
		return
	}
	k, kEnd, err := encode(b.nl.fam, o.key, key)
	if err != nil {
		b.err = fmt.Errorf("set %s: %w", o.name, err)
		return
	}
	e := gnft.SetElement{Key: k, KeyEnd: kEnd}
	if !deleting {
		e.Comment = w.comment
		if len(o.value) > 0 {
			if e.Val, _, err = encode(b.nl.fam, o.value, w.value); err != nil {
				b.err = fmt.Errorf("map %s: %w", o.name, err)
				return
			}
		}
	}
	size := 32 + len(e.Key) + len(e.KeyEnd) + len(e.Val) + len(e.Comment)
	if o.name != b.set || deleting != b.deleting || b.size+size > maxMessageBytes {
		b.endMessage()
		b.set, b.deleting = o.name, deleting
	}
	b.elems = append(b.elems, e)
	b.size += size
}

// endMessage adds the message being filled to the batch.
func (b *elementBatch) endMessage() {
	if len(b.elems) == 0 || b.err != nil {
		b.elems, b.size = b.elems[:0], 0
		return
	}
	s := &gnft.Set{Table: b.nl.table, Name: b.set}
	var err error
	if b.deleting {
		err = b.conn.SetDeleteElements(s, b.elems)
	} else {
		err = b.conn.SetAddElements(s, b.elems)
	}
	if err != nil {
		b.err = fmt.Errorf("set %s: %w", b.set, err)
	}
	b.messages++
	b.bytes += b.size + 64
	b.elems, b.size = b.elems[:0], 0
}

// pendingBytes is the size of the batch so far.
func (b *elementBatch) pendingBytes() int { return b.bytes + b.size }

// commit sends the batch as one transaction and starts a new one.
func (b *elementBatch) commit() error {
	b.endMessage()
	if b.err != nil {
		return b.err
	}
	if b.messages == 0 {
		return nil
	}
	err := netns.Do(b.nl.netns, b.conn.Flush)
	b.newConn()
	if err != nil {
		return &NetlinkError{Err: err}
	}
	return b.err
}

// NetlinkError is a netlink transaction the kernel refused. Its errno
// says why: IsNotFound and IsAlreadyExists read it as knftables' do for
// an nft transaction.
type NetlinkError struct {
	Err error
}

func (e *NetlinkError) Error() string { return "netlink: " + e.Err.Error() }

func (e *NetlinkError) Unwrap() error { return e.Err }

// IsNotFound tells whether err is a transaction (nft's, through
// knftables, or netlink's) refused because an object or element did not
// exist.
func IsNotFound(err error) bool {
	var nerr *NetlinkError
	if errors.As(err, &nerr) {
		return errors.Is(nerr.Err, syscall.ENOENT)
	}
	return knftables.IsNotFound(err)
}

// IsAlreadyExists tells whether err is a transaction refused because an
// object or element already existed.
func IsAlreadyExists(err error) bool {
	var nerr *NetlinkError
	if errors.As(err, &nerr) {
		return errors.Is(nerr.Err, syscall.EEXIST)
	}
	return knftables.IsAlreadyExists(err)
}
