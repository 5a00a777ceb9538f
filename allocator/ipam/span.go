// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipam

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/netip"
)

// span is the allocatable part of one prefix: every address but the network
// address, and for IPv4 the broadcast address too, as kube-apiserver's
// allocator does. Addresses map to indexes 0..size-1 through the low 64 bits,
// which is why IPv6 prefixes must be /64 or longer.
type span struct {
	prefix netip.Prefix
	high   uint64 // IPv6: the upper 64 bits shared by every address
	first  uint64 // low 64 bits of the first allocatable address
	size   uint64
	offset uint64 // KEP-3070: [0, offset) is the static band
}

func newSpan(p netip.Prefix) (span, error) {
	if !p.IsValid() {
		return span{}, fmt.Errorf("invalid prefix %v", p)
	}
	p = p.Masked()
	s := span{prefix: p}
	var total uint64 // addresses in the prefix, saturated at MaxUint64
	if p.Addr().Is4() {
		s.first = uint64(binary.BigEndian.Uint32(p.Addr().AsSlice())) + 1
		total = uint64(1) << (32 - p.Bits())
		if total > 2 {
			s.size = total - 2
		}
	} else {
		if p.Bits() < 64 {
			return span{}, fmt.Errorf("IPv6 prefix %v is shorter than /64", p)
		}
		b := p.Addr().As16()
		s.high = binary.BigEndian.Uint64(b[:8])
		s.first = binary.BigEndian.Uint64(b[8:]) + 1
		if host := 128 - p.Bits(); host == 64 {
			total = math.MaxUint64 // 2^64, saturated
			s.size = math.MaxUint64
		} else {
			total = uint64(1) << host
			s.size = total - 1
		}
	}
	s.offset = bandOffset(total)
	return s, nil
}

// bandOffset is KEP-3070's min(max(16, size/16), 256) over the prefix size,
// with no static band for ranges of 16 addresses or less.
func bandOffset(total uint64) uint64 {
	if total <= 16 {
		return 0
	}
	return min(max(16, total/16), 256)
}

// index returns the index of a, and false when a is not allocatable here.
func (s span) index(a netip.Addr) (uint64, bool) {
	if !s.prefix.Contains(a) {
		return 0, false
	}
	var low uint64
	if a.Is4() {
		low = uint64(binary.BigEndian.Uint32(a.AsSlice()))
	} else {
		b := a.As16()
		low = binary.BigEndian.Uint64(b[8:])
	}
	if low < s.first || low-s.first >= s.size {
		return 0, false
	}
	return low - s.first, true
}

func (s span) addr(i uint64) netip.Addr {
	if s.prefix.Addr().Is4() {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(s.first+i))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s.high)
	binary.BigEndian.PutUint64(b[8:], s.first+i)
	return netip.AddrFrom16(b)
}

// lastIndexWithin returns the index of the last allocatable address of s
// that lies inside q (q overlaps s).
func (s span) lastIndexWithin(q netip.Prefix) uint64 {
	if q.Bits() <= s.prefix.Bits() {
		return s.size - 1
	}
	last := LastAddr(q)
	if i, ok := s.index(last); ok {
		return i
	}
	return s.size - 1 // q's last address is s's broadcast address
}

// LastAddr is the last address of p.
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
