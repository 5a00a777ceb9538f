// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a session's state (RFC 5880 §4.1 Sta).
type State uint8

// The states, with their values on the wire.
const (
	StateAdminDown State = 0
	StateDown      State = 1
	StateInit      State = 2
	StateUp        State = 3
)

func (s State) String() string {
	switch s {
	case StateAdminDown:
		return "AdminDown"
	case StateDown:
		return "Down"
	case StateInit:
		return "Init"
	case StateUp:
		return "Up"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Diag says why a session last left Up (RFC 5880 §4.1 Diag).
type Diag uint8

// The diagnostics this implementation sets.
const (
	DiagNone             Diag = 0
	DiagDetectionExpired Diag = 1
	DiagNeighborDown     Diag = 3
	DiagAdminDown        Diag = 7
)

// ControlPacket is a BFD Control packet without authentication.
type ControlPacket struct {
	Diag       Diag
	State      State
	Poll       bool
	Final      bool
	Demand     bool
	Multipoint bool
	// AuthPresent is the A bit; such packets are discarded (no
	// authentication here).
	AuthPresent      bool
	DetectMult       uint8
	MyDisc, YourDisc uint32
	// The intervals travel in microseconds.
	DesiredMinTx, RequiredMinRx, RequiredMinEchoRx time.Duration
}

// packetLen is the length of a Control packet without authentication.
const packetLen = 24

const version = 1

// Marshal is the packet on the wire.
func (p ControlPacket) Marshal() []byte {
	b := make([]byte, packetLen)
	b[0] = version<<5 | byte(p.Diag)&0x1f
	b[1] = byte(p.State) << 6
	for i, bit := range []bool{p.Poll, p.Final, false, p.AuthPresent, p.Demand, p.Multipoint} {
		if bit {
			b[1] |= 1 << (5 - i)
		}
	}
	b[2] = p.DetectMult
	b[3] = packetLen
	binary.BigEndian.PutUint32(b[4:], p.MyDisc)
	binary.BigEndian.PutUint32(b[8:], p.YourDisc)
	binary.BigEndian.PutUint32(b[12:], micros(p.DesiredMinTx))
	binary.BigEndian.PutUint32(b[16:], micros(p.RequiredMinRx))
	binary.BigEndian.PutUint32(b[20:], micros(p.RequiredMinEchoRx))
	return b
}

func micros(d time.Duration) uint32 { return uint32(min(d.Microseconds(), 1<<32-1)) }

// Parse decodes a Control packet and applies the checks of RFC 5880
// §6.8.6 that need no session: a packet failing them is to be discarded.
func Parse(b []byte) (ControlPacket, error) {
	if len(b) < packetLen {
		return ControlPacket{}, fmt.Errorf("bfd: packet of %d bytes is shorter than %d", len(b), packetLen)
	}
	if v := b[0] >> 5; v != version {
		return ControlPacket{}, fmt.Errorf("bfd: version %d, not %d", v, version)
	}
	p := ControlPacket{
		Diag: Diag(b[0] & 0x1f), State: State(b[1] >> 6),
		Poll: b[1]&0x20 != 0, Final: b[1]&0x10 != 0, AuthPresent: b[1]&0x04 != 0, Demand: b[1]&0x02 != 0, Multipoint: b[1]&0x01 != 0,
		DetectMult: b[2], MyDisc: binary.BigEndian.Uint32(b[4:]), YourDisc: binary.BigEndian.Uint32(b[8:]),
		DesiredMinTx:      time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond,
		RequiredMinRx:     time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond,
		RequiredMinEchoRx: time.Duration(binary.BigEndian.Uint32(b[20:])) * time.Microsecond,
	}
	length := int(b[3])
	minLen := packetLen
	if p.AuthPresent {
		minLen = 26
	}
	switch {
	case length < minLen:
		return ControlPacket{}, fmt.Errorf("bfd: length field %d is under %d", length, minLen)
	case length > len(b):
		return ControlPacket{}, fmt.Errorf("bfd: length field %d exceeds the %d bytes received", length, len(b))
	case p.DetectMult == 0:
		return ControlPacket{}, errors.New("bfd: detect multiplier is zero")
	case p.Multipoint:
		return ControlPacket{}, errors.New("bfd: multipoint bit is set")
	case p.MyDisc == 0:
		return ControlPacket{}, errors.New("bfd: my discriminator is zero")
	case p.YourDisc == 0 && p.State != StateDown && p.State != StateAdminDown:
		return ControlPacket{}, fmt.Errorf("bfd: your discriminator is zero in state %s", p.State)
	case p.Poll && p.Final:
		return ControlPacket{}, errors.New("bfd: both poll and final bits are set")
	}
	return p, nil
}

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "None"
	case DiagDetectionExpired:
		return "ControlDetectionTimeExpired"
	case DiagNeighborDown:
		return "NeighborSignaledSessionDown"
	case DiagAdminDown:
		return "AdministrativelyDown"
	}
	return fmt.Sprintf("Diag(%d)", uint8(d))
}
