// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nfacct

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestEncodeRequest pins the bytes of a request against the kernel's
// layout: nlmsghdr (native endian), nfgenmsg, then NFACCT_NAME with its
// NUL, padded to 4 bytes.
func TestEncodeRequest(t *testing.T) {
	got := encodeRequest(msgGet, unix.NLM_F_REQUEST|unix.NLM_F_ACK, 7, "abcd")
	want := []byte{}
	want = binary.NativeEndian.AppendUint32(want, 32)     // length
	want = binary.NativeEndian.AppendUint16(want, 0x0701) // NFNL_SUBSYS_ACCT<<8 | NFNL_MSG_ACCT_GET
	want = binary.NativeEndian.AppendUint16(want, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	want = binary.NativeEndian.AppendUint32(want, 7) // sequence
	want = binary.NativeEndian.AppendUint32(want, 0) // port: the kernel's
	want = append(want, unix.AF_UNSPEC, 0, 0, 0)     // nfgenmsg
	want = binary.NativeEndian.AppendUint16(want, 9) // attribute length: 4 + "abcd\x00"
	want = binary.NativeEndian.AppendUint16(want, 1) // NFACCT_NAME
	want = append(want, 'a', 'b', 'c', 'd', 0, 0, 0, 0)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if got := binary.NativeEndian.Uint16(encodeRequest(msgNew, 0, 1, "x")[4:6]); got != 0x0700 {
		t.Errorf("NEW message type %#x, want 0x700", got)
	}
}

// counterMessage is a reply as the kernel sends one: the counter's
// attributes, with the use count it adds, flagged NLM_F_MULTI.
func counterMessage(seq uint32, c Counter) []byte {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.String(attrName, c.Name)
	ae.Uint64(attrPackets, c.Packets)
	ae.Uint64(attrBytes, c.Bytes)
	ae.Uint32(4, 1) // NFACCT_USE
	attrs, err := ae.Encode()
	if err != nil {
		panic(err)
	}
	return message(msgType(msgNew), unix.NLM_F_MULTI, seq, append([]byte{unix.AF_UNSPEC, 0, 0, 0}, attrs...))
}

// rawAttr is an attribute as its header says, padded, whatever its data.
func rawAttr(typ uint16, length int, data ...byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(length))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func message(typ, flags uint16, seq uint32, data []byte) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(unix.SizeofNlMsghdr+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 1234)
	return append(b, data...)
}

// ack is the kernel's NLMSG_ERROR: errno 0 acknowledges.
func ack(seq uint32, errno syscall.Errno) []byte {
	data := binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno)))
	data = append(data, make([]byte, unix.SizeofNlMsghdr)...) // the request's header, echoed
	return message(unix.NLMSG_ERROR, 0, seq, data)
}

func TestDecodeCounter(t *testing.T) {
	full := counterMessage(1, Counter{Name: "localhost_nps_accepted_pkts", Packets: 1 << 40, Bytes: 3})[unix.SizeofNlMsghdr:]
	got, err := decodeCounter(full)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Counter{Name: "localhost_nps_accepted_pkts", Packets: 1 << 40, Bytes: 3}, got); diff != "" {
		t.Errorf("counter (-want +got):\n%s", diff)
	}

	nfgen := []byte{unix.AF_UNSPEC, 0, 0, 0}
	name := rawAttr(attrName, 6, 'x', 0)
	eight := []byte{0, 0, 0, 0, 0, 0, 0, 1}
	if c, err := decodeCounter(slices.Concat(nfgen, name, rawAttr(attrPackets, 12, eight...), rawAttr(attrBytes, 12, eight...))); err != nil || c != (Counter{Name: "x", Packets: 1, Bytes: 1}) {
		t.Fatalf("the attributes the cases below break decode to %+v, %v", c, err)
	}
	for what, attrs := range map[string][][]byte{
		"no nfgenmsg":                 nil,
		"no bytes attribute":          {nfgen, name, rawAttr(attrPackets, 12, eight...)},
		"a packets attribute of 4":    {nfgen, name, rawAttr(attrPackets, 8, 0, 0, 0, 1), rawAttr(attrBytes, 12, eight...)},
		"an attribute past the end":   {nfgen, name, rawAttr(attrPackets, 40, eight...)},
		"an attribute header cut off": {nfgen, name, {0x0c, 0}},
	} {
		data := []byte{0, 0}
		if attrs != nil {
			data = slices.Concat(attrs...)
		}
		if c, err := decodeCounter(data); err == nil {
			t.Errorf("%s: decoded %+v without an error", what, c)
		}
	}
}

// fakeSocket answers each request with the datagrams answer returns.
type fakeSocket struct {
	answer   func(req []byte) [][]byte
	requests [][]byte
	pending  [][]byte
	closed   bool
}

func (s *fakeSocket) send(b []byte) error {
	s.requests = append(s.requests, b)
	s.pending = append(s.pending, s.answer(b)...)
	return nil
}

func (s *fakeSocket) receive() ([]byte, error) {
	if len(s.pending) == 0 {
		return nil, unix.EAGAIN
	}
	b := s.pending[0]
	s.pending = s.pending[1:]
	return b, nil
}

func (s *fakeSocket) close() error { s.closed = true; return nil }

// fakeKernel keeps counters as nfnetlink_acct does and answers as it
// does, including the reply's NLM_F_MULTI without NLMSG_DONE; refuse
// makes it refuse every request with that errno.
type fakeKernel struct {
	counters map[string]Counter
	refuse   syscall.Errno
	// stale is sent before each answer, as a datagram another
	// exchange left behind would be.
	stale  []byte
	socket *fakeSocket
}

func (k *fakeKernel) client() *Client {
	c := New("")
	c.dial = func() (socket, error) {
		k.socket = &fakeSocket{answer: k.answer}
		return k.socket, nil
	}
	return c
}

func (k *fakeKernel) answer(req []byte) [][]byte {
	msgs, err := syscall.ParseNetlinkMessage(req)
	if err != nil || len(msgs) != 1 {
		panic("the client sent no single message")
	}
	m := msgs[0]
	seq := m.Header.Seq
	out := [][]byte{}
	if k.stale != nil {
		out = append(out, k.stale)
	}
	if k.refuse != 0 {
		return append(out, ack(seq, k.refuse))
	}
	ad, err := netlink.NewAttributeDecoder(m.Data[nfgenmsgLen:])
	if err != nil || !ad.Next() || ad.Type() != attrName {
		return append(out, ack(seq, unix.EINVAL))
	}
	name := ad.String()
	c, exists := k.counters[name]
	switch m.Header.Type {
	case msgType(msgNew):
		if exists {
			return append(out, ack(seq, unix.EBUSY))
		}
		k.counters[name] = Counter{Name: name}
		return append(out, ack(seq, 0))
	case msgType(msgGet):
		if !exists {
			return append(out, ack(seq, unix.ENOENT))
		}
		return append(out, counterMessage(seq, c), ack(seq, 0))
	}
	return append(out, ack(seq, unix.EOPNOTSUPP))
}

func TestEnsureThenGet(t *testing.T) {
	k := &fakeKernel{counters: map[string]Counter{"busy": {Name: "busy", Packets: 5, Bytes: 300}}}
	c := k.client()
	if err := c.Ensure("fresh"); err != nil {
		t.Fatalf("Ensure of a new counter: %v", err)
	}
	req, _ := syscall.ParseNetlinkMessage(k.socket.requests[0])
	if want := uint16(unix.NLM_F_REQUEST | unix.NLM_F_CREATE | unix.NLM_F_ACK); req[0].Header.Flags != want {
		t.Errorf("NEW flags %#x, want %#x", req[0].Header.Flags, want)
	}
	if !k.socket.closed {
		t.Error("the socket of an exchange stayed open")
	}
	if err := c.Ensure("busy"); err != nil {
		t.Fatalf("Ensure of an existing counter (EBUSY): %v", err)
	}
	got, err := c.Get("busy")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Counter{Name: "busy", Packets: 5, Bytes: 300}, got); diff != "" {
		t.Errorf("Ensure reset an existing counter (-want +got):\n%s", diff)
	}
	if got, err := c.Get("fresh"); err != nil || got != (Counter{Name: "fresh"}) {
		t.Errorf("Get(fresh) = %+v, %v; want a zero counter", got, err)
	}
	if _, err := c.Get("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) error %v, want ErrNotFound", err)
	}
}

func TestRepliesOfOtherExchangesAreIgnored(t *testing.T) {
	k := &fakeKernel{counters: map[string]Counter{"a": {Name: "a", Packets: 1, Bytes: 2}}}
	k.stale = ack(999, unix.ENOENT)
	c := k.client()
	if got, err := c.Get("a"); err != nil || got.Packets != 1 {
		t.Errorf("Get(a) with a stale datagram first = %+v, %v", got, err)
	}
}

func TestErrors(t *testing.T) {
	k := &fakeKernel{counters: map[string]Counter{}, refuse: unix.EPERM}
	c := k.client()
	if err := c.Ensure("x"); !errors.Is(err, unix.EPERM) {
		t.Errorf("Ensure refused: %v, want EPERM", err)
	}
	if err := c.Available(); !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.EPERM) {
		t.Errorf("Available refused with EPERM: %v, want ErrNotSupported and EPERM", err)
	}
	k.refuse = unix.EINVAL // no nfnetlink_acct subsystem
	if err := c.Available(); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Available without the subsystem: %v, want ErrNotSupported", err)
	}
	k.refuse = 0
	if err := c.Available(); err != nil {
		t.Errorf("Available answered ENOENT: %v, want nil", err)
	}

	k.socket = nil
	for _, name := range []string{"", strings.Repeat("n", MaxNameLen+1), "a\x00b"} {
		if err := c.Ensure(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Ensure(%q): %v, want ErrInvalidName", name, err)
		}
		if _, err := c.Get(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Get(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if k.socket != nil {
		t.Error("an invalid name reached the kernel")
	}
	long := strings.Repeat("n", MaxNameLen)
	if err := c.Ensure(long); err != nil {
		t.Errorf("Ensure of a %d-byte name: %v", MaxNameLen, err)
	}
	if err := c.Ensure(long + "n"); err == nil || !strings.Contains(err.Error(), "at most 31") {
		t.Errorf("Ensure of a %d-byte name: %v, want an error saying the limit", MaxNameLen+1, err)
	}
}

func TestNoAnswer(t *testing.T) {
	c := New("")
	c.dial = func() (socket, error) { return &fakeSocket{answer: func([]byte) [][]byte { return nil }}, nil }
	if _, err := c.Get("x"); !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Get without an answer: %v, want the receive timeout (EAGAIN)", err)
	}
}
