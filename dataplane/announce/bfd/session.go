// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bfd

import (
	"math/rand/v2"
	"time"
)

// Config is what one end of a session asks for.
type Config struct {
	// DesiredMinTx is the interval this end would like to send at once
	// the session is Up.
	DesiredMinTx time.Duration
	// RequiredMinRx is the shortest interval between received packets
	// this end can take.
	RequiredMinRx time.Duration
	// DetectMult is how many intervals may pass without a packet before
	// the other end declares the session Down.
	DetectMult uint8
}

// SlowTx is the interval a session sends at while it is not Up (RFC
// 5880 §6.8.3: at least one second).
const SlowTx = time.Second

// Session is one BFD session's state machine (RFC 5880 §6.8), with no
// I/O and no clock of its own: the caller hands it what it receives
// (Receive), asks it when it next needs to be called (Next), lets it
// declare the session Down when the detection time passes (Expire) and
// sends what Transmit returns. Not safe for concurrent use.
type Session struct {
	cfg       Config
	localDisc uint32
	state     State
	diag      Diag

	remoteDisc       uint32
	remoteState      State
	remoteDiag       Diag
	remoteMinRx      time.Duration
	remoteDesiredTx  time.Duration
	remoteDetectMult uint8

	// desiredTx is the DesiredMinTx this end advertises; txInUse the one
	// it sends at, which lags behind an increase until the poll sequence
	// announcing it ends (§6.8.3).
	desiredTx, txInUse time.Duration
	// polling is a poll sequence in progress: every periodic packet has
	// the P bit until one with F comes back.
	polling bool
	// final is an F bit owed to the remote's poll, sent at once.
	final bool

	lastRx, lastTx, nextTx time.Time
	// jitter shortens each interval as §6.8.7 asks.
	jitter func(d time.Duration, detectMult uint8) time.Duration
}

// NewSession is a session in state Down with local discriminator disc
// (non-zero, unique on this system), first sending at now.
func NewSession(cfg Config, disc uint32, now time.Time) *Session {
	return &Session{
		cfg: cfg, localDisc: disc, state: StateDown,
		// §6.8.1: RemoteMinRxInterval starts at 1 µs.
		remoteMinRx: time.Microsecond, desiredTx: SlowTx, txInUse: SlowTx,
		nextTx: now, jitter: randomJitter,
	}
}

// randomJitter is d less 0-25% (0-10%, so at least 10%, with a detect
// multiplier of 1), RFC 5880 §6.8.7.
func randomJitter(d time.Duration, detectMult uint8) time.Duration {
	if detectMult == 1 {
		return d - d/10 - time.Duration(rand.Int64N(int64(d)*15/100+1))
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// State is the session's state.
func (s *Session) State() State { return s.state }

// Diag is why the session last went Down.
func (s *Session) Diag() Diag { return s.diag }

// RemoteDiag is the diagnostic of the remote's last packet: why it says
// it went Down.
func (s *Session) RemoteDiag() Diag { return s.remoteDiag }

// LocalDisc is the session's own discriminator.
func (s *Session) LocalDisc() uint32 { return s.localDisc }

// RemoteDisc is the remote's discriminator; 0 while unknown.
func (s *Session) RemoteDisc() uint32 { return s.remoteDisc }

// TxInterval is the interval between periodic packets before jitter:
// the larger of what this end sends at and what the remote can take.
func (s *Session) TxInterval() time.Duration { return max(s.txInUse, s.remoteMinRx) }

// DetectionTime is how long the session may go without a packet before
// it is Down: the remote's multiplier times the larger of the interval
// this end can take and the one the remote sends at (§6.8.4).
func (s *Session) DetectionTime() time.Duration {
	return time.Duration(s.remoteDetectMult) * max(s.cfg.RequiredMinRx, s.remoteDesiredTx)
}

// Receive applies a received packet (RFC 5880 §6.8.6, after the checks
// Parse makes) and tells whether a packet is owed at once: the Final of
// the remote's poll.
func (s *Session) Receive(now time.Time, p ControlPacket) (sendNow bool) {
	if p.AuthPresent || p.YourDisc != 0 && p.YourDisc != s.localDisc {
		return false
	}
	s.remoteDisc, s.remoteState, s.remoteDiag = p.MyDisc, p.State, p.Diag
	s.remoteMinRx, s.remoteDesiredTx, s.remoteDetectMult = p.RequiredMinRx, p.DesiredMinTx, p.DetectMult
	if p.Final && s.polling {
		s.polling, s.txInUse = false, s.desiredTx
	}
	s.lastRx = now
	s.reschedule()
	if s.state == StateAdminDown {
		return false
	}
	switch {
	case p.State == StateAdminDown:
		if s.state != StateDown {
			s.goDown(DiagNeighborDown)
		}
	case s.state == StateDown && p.State == StateDown:
		s.state = StateInit
	case s.state == StateDown && p.State == StateInit, s.state == StateInit && p.State >= StateInit:
		s.goUp()
	case s.state == StateUp && p.State == StateDown:
		s.goDown(DiagNeighborDown)
	}
	if p.Poll {
		s.final = true
	}
	return s.final
}

// goUp enters Up and starts the poll sequence that moves from the slow
// interval to the configured one.
func (s *Session) goUp() {
	s.state, s.diag = StateUp, DiagNone
	s.setDesiredTx(s.cfg.DesiredMinTx)
}

// goDown enters Down with diag; the slow interval applies at once.
func (s *Session) goDown(diag Diag) {
	s.state, s.diag = StateDown, diag
	s.desiredTx, s.txInUse, s.polling = SlowTx, SlowTx, false
	s.reschedule()
}

// setDesiredTx changes the advertised interval with a poll sequence; a
// decrease applies at once, an increase once the sequence ends (§6.8.3).
func (s *Session) setDesiredTx(d time.Duration) {
	if d == s.desiredTx {
		return
	}
	s.desiredTx, s.polling = d, true
	if d < s.txInUse {
		s.txInUse = d
		s.reschedule()
	}
}

// reschedule brings the next periodic packet forward when the interval
// became shorter than what was planned.
func (s *Session) reschedule() {
	if s.lastTx.IsZero() {
		return
	}
	if next := s.lastTx.Add(s.jitter(s.TxInterval(), s.cfg.DetectMult)); next.Before(s.nextTx) {
		s.nextTx = next
	}
}

// Expire declares the session Down when it has heard nothing for the
// detection time, and tells whether it did.
func (s *Session) Expire(now time.Time) bool {
	if s.state != StateInit && s.state != StateUp || now.Before(s.lastRx.Add(s.DetectionTime())) {
		return false
	}
	s.goDown(DiagDetectionExpired)
	// §6.8.1: the remote is forgotten once the detection time passes.
	s.remoteDisc = 0
	return true
}

// Shutdown moves the session to AdminDown: the remote takes it Down
// without declaring a failure (RFC 5882 §3.2).
func (s *Session) Shutdown() {
	s.state, s.diag = StateAdminDown, DiagAdminDown
	s.desiredTx, s.txInUse, s.polling = SlowTx, SlowTx, false
}

// Next is when the session needs its caller again: its next packet is
// due, or its detection time passes.
func (s *Session) Next() time.Time {
	next := s.nextTx
	if s.remoteMinRx == 0 {
		// No periodic packets: look again in a while.
		next = s.lastRx.Add(SlowTx)
	}
	if s.final {
		next = s.lastRx
	}
	if s.state == StateInit || s.state == StateUp {
		if d := s.lastRx.Add(s.DetectionTime()); d.Before(next) {
			next = d
		}
	}
	return next
}

// Transmit returns the packet to send at now, if one is due: the Final
// owed to a poll, or the periodic one (§6.8.7), which is not sent while
// the remote asks for none (RequiredMinRx 0).
func (s *Session) Transmit(now time.Time) (ControlPacket, bool) {
	p := ControlPacket{
		Diag: s.diag, State: s.state, DetectMult: s.cfg.DetectMult, MyDisc: s.localDisc, YourDisc: s.remoteDisc,
		DesiredMinTx: s.desiredTx, RequiredMinRx: s.cfg.RequiredMinRx,
	}
	if s.final {
		s.final, p.Final = false, true
		return p, true
	}
	if now.Before(s.nextTx) || s.remoteMinRx == 0 {
		return ControlPacket{}, false
	}
	p.Poll = s.polling
	s.lastTx = now
	s.nextTx = now.Add(s.jitter(s.TxInterval(), s.cfg.DetectMult))
	return p, true
}
