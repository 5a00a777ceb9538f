// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// EtherType is the heartbeat frames' EtherType: IEEE 802's "local
// experimental" type, which no standard protocol uses.
const EtherType = 0x88B5

// Heartbeat is what an agent tells its peers on a segment.
type Heartbeat struct {
	Node string
	// Incarnation changes each time the agent starts, so peers forget
	// what the previous run claimed.
	Incarnation uint64
	Seq         uint32
	// Ready: the sender has listened for a dead interval and may answer.
	Ready bool
	// Leaving: the sender stops (its agent shuts down): others take its
	// addresses at once.
	Leaving bool
	// Announcements are the LoadBalancerAnnouncements the sender serves
	// on this segment.
	Announcements []string
	// Claims are the addresses it answers for on this segment.
	Claims []netip.Addr
}

var magic = [4]byte{'S', 'V', 'H', 'B'}

const (
	version    = 1
	headerLen  = 4 + 1 + 1 + 8 + 4 + 2 + 2 // magic, version, flags, incarnation, seq, fragment, fragments
	flagReady  = 1
	flagLeave  = 2
	maxStrings = 1 << 12
)

// fragment is one frame of a heartbeat.
type fragment struct {
	incarnation uint64
	seq         uint32
	ready       bool
	leaving     bool
	index, of   uint16
	payload     []byte
}

// encode splits a heartbeat into frames of at most mtu bytes.
func (h *Heartbeat) encode(mtu int) ([][]byte, error) {
	var body []byte
	body = appendString(body, h.Node)
	body = binary.BigEndian.AppendUint16(body, uint16(len(h.Announcements)))
	for _, a := range h.Announcements {
		body = appendString(body, a)
	}
	body = binary.BigEndian.AppendUint32(body, uint32(len(h.Claims)))
	for _, c := range h.Claims {
		b := c.AsSlice()
		body = append(body, byte(len(b)))
		body = append(body, b...)
	}
	room := mtu - headerLen
	if room < 64 {
		return nil, fmt.Errorf("mtu %d is too small for heartbeats", mtu)
	}
	n := (len(body) + room - 1) / room
	if n > 1<<16-1 {
		return nil, errors.New("heartbeat too large")
	}
	frames := make([][]byte, 0, n)
	for i := range n {
		part := body[i*room : min((i+1)*room, len(body))]
		f := make([]byte, 0, headerLen+len(part))
		f = append(f, magic[:]...)
		flags := byte(0)
		if h.Ready {
			flags |= flagReady
		}
		if h.Leaving {
			flags |= flagLeave
		}
		f = append(f, version, flags)
		f = binary.BigEndian.AppendUint64(f, h.Incarnation)
		f = binary.BigEndian.AppendUint32(f, h.Seq)
		f = binary.BigEndian.AppendUint16(f, uint16(i))
		f = binary.BigEndian.AppendUint16(f, uint16(n))
		frames = append(frames, append(f, part...))
	}
	return frames, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

var errNotHeartbeat = errors.New("not a heartbeat frame")

func parseFragment(b []byte) (fragment, error) {
	if len(b) < headerLen || [4]byte(b[:4]) != magic || b[4] != version {
		return fragment{}, errNotHeartbeat
	}
	f := fragment{
		ready:       b[5]&flagReady != 0,
		leaving:     b[5]&flagLeave != 0,
		incarnation: binary.BigEndian.Uint64(b[6:]),
		seq:         binary.BigEndian.Uint32(b[14:]),
		index:       binary.BigEndian.Uint16(b[18:]),
		of:          binary.BigEndian.Uint16(b[20:]),
		payload:     b[headerLen:],
	}
	if f.of == 0 || f.index >= f.of {
		return fragment{}, errNotHeartbeat
	}
	return f, nil
}

// decodeBody parses a whole heartbeat's body.
func decodeBody(f fragment, body []byte) (*Heartbeat, error) {
	h := &Heartbeat{Incarnation: f.incarnation, Seq: f.seq, Ready: f.ready, Leaving: f.leaving}
	r := reader{b: body}
	h.Node = r.string()
	n := int(r.uint16())
	if n > maxStrings {
		return nil, errNotHeartbeat
	}
	for range n {
		h.Announcements = append(h.Announcements, r.string())
	}
	claims := r.uint32()
	for range claims {
		if r.err != nil {
			break
		}
		l := int(r.byte())
		if l != 4 && l != 16 {
			return nil, errNotHeartbeat
		}
		a, _ := netip.AddrFromSlice(r.bytes(l))
		h.Claims = append(h.Claims, a)
	}
	if r.err != nil || h.Node == "" {
		return nil, errNotHeartbeat
	}
	return h, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = errNotHeartbeat
		return make([]byte, n)
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) byte() byte     { return r.bytes(1)[0] }
func (r *reader) uint16() uint16 { return binary.BigEndian.Uint16(r.bytes(2)) }
func (r *reader) uint32() uint32 { return binary.BigEndian.Uint32(r.bytes(4)) }
func (r *reader) string() string { return string(r.bytes(int(r.uint16()))) }

// assembler puts heartbeats back together, per sender.
type assembler struct {
	pending map[string]*partial
}

type partial struct {
	incarnation uint64
	seq         uint32
	parts       [][]byte
	have        int
}

// add takes one frame from the sender at hw and returns the heartbeat it
// completes, if any.
func (a *assembler) add(hw string, b []byte) (*Heartbeat, error) {
	f, err := parseFragment(b)
	if err != nil {
		return nil, err
	}
	if f.of == 1 {
		return decodeBody(f, f.payload)
	}
	if a.pending == nil {
		a.pending = map[string]*partial{}
	}
	p := a.pending[hw]
	if p == nil || p.incarnation != f.incarnation || p.seq != f.seq || len(p.parts) != int(f.of) {
		p = &partial{incarnation: f.incarnation, seq: f.seq, parts: make([][]byte, f.of)}
		a.pending[hw] = p
	}
	if p.parts[f.index] == nil {
		p.parts[f.index] = append([]byte(nil), f.payload...)
		p.have++
	}
	if p.have < len(p.parts) {
		return nil, nil
	}
	delete(a.pending, hw)
	var body []byte
	for _, part := range p.parts {
		body = append(body, part...)
	}
	return decodeBody(f, body)
}
