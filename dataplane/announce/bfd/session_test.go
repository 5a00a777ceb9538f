// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bfd

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	localDisc  = 0x1111
	remoteDisc = 0x2222
	ms         = time.Millisecond
)

var (
	fast = Config{DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms, DetectMult: 3}
	t0   = time.Unix(1_000_000, 0)
)

// from is a packet from the remote in state st, asking for 200 ms.
func from(st State) ControlPacket {
	p := ControlPacket{State: st, DetectMult: 3, MyDisc: remoteDisc, DesiredMinTx: 200 * ms, RequiredMinRx: 200 * ms}
	if st != StateDown && st != StateAdminDown {
		p.YourDisc = localDisc
	}
	return p
}

// step is one thing that happens to a session, at t0 plus at.
type step struct {
	at       time.Duration
	receive  *ControlPacket
	expire   bool
	shutdown bool
}

func recv(at time.Duration, p ControlPacket) step { return step{at: at, receive: &p} }

// observed is what the test looks at after the steps.
type observed struct {
	State         State
	Diag          Diag
	RemoteDisc    uint32
	TxInterval    time.Duration
	DetectionTime time.Duration
	// Sent is the packet Transmit returns at the last step's time.
	Sent *ControlPacket
}

func TestSession(t *testing.T) {
	up := func(at time.Duration) []step {
		return []step{recv(at, from(StateDown)), recv(at+10*ms, from(StateUp))}
	}
	withPoll := func(p ControlPacket) ControlPacket { p.Poll = true; return p }
	withFinal := func(p ControlPacket) ControlPacket { p.Final = true; return p }
	cases := map[string]struct {
		steps []step
		want  observed
	}{
		"new session is Down and sends slowly with no remote": {
			want: observed{State: StateDown, RemoteDisc: 0, TxInterval: SlowTx,
				Sent: &ControlPacket{State: StateDown, DetectMult: 3, MyDisc: localDisc, DesiredMinTx: SlowTx, RequiredMinRx: 300 * ms}},
		},
		"remote Down: Init": {
			steps: []step{recv(0, from(StateDown))},
			want: observed{State: StateInit, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms,
				Sent: &ControlPacket{State: StateInit, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: SlowTx, RequiredMinRx: 300 * ms}},
		},
		"remote Init while Down: Up, polling for the fast interval": {
			steps: []step{recv(0, from(StateInit))},
			want: observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms,
				Sent: &ControlPacket{State: StateUp, Poll: true, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		},
		"remote Up while Init: Up": {
			steps: up(0),
			want:  observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms, Sent: &ControlPacket{State: StateUp, Poll: true, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		},
		"remote Up while Down: stays Down": {
			steps: []step{recv(0, from(StateUp))},
			want:  observed{State: StateDown, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms, Sent: &ControlPacket{State: StateDown, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: SlowTx, RequiredMinRx: 300 * ms}},
		},
		"final ends the poll": {
			steps: append(up(0), recv(20*ms, withFinal(from(StateUp)))),
			want: observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms,
				Sent: &ControlPacket{State: StateUp, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		},
		"remote's poll is answered with final, without poll": {
			steps: append(up(0), recv(20*ms, withPoll(from(StateUp)))),
			want: observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms,
				Sent: &ControlPacket{State: StateUp, Final: true, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		},
		"remote slower than this end: its interval counts": {
			steps: func() []step {
				p := from(StateUp)
				p.DesiredMinTx, p.RequiredMinRx, p.DetectMult = 500*ms, 700*ms, 5
				return append(up(0), recv(20*ms, p))
			}(),
			want: observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 700 * ms, DetectionTime: 2500 * ms,
				Sent: &ControlPacket{State: StateUp, Poll: true, DetectMult: 3, MyDisc: localDisc, YourDisc: remoteDisc, DesiredMinTx: 300 * ms, RequiredMinRx: 300 * ms}},
		},
		"detection time not yet passed": {
			steps: append(up(0), step{at: 10*ms + 899*ms, expire: true}),
			want:  observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms},
		},
		"detection time passed: Down, remote forgotten, slow again": {
			steps: append(up(0), step{at: 10*ms + 900*ms, expire: true}),
			want: observed{State: StateDown, Diag: DiagDetectionExpired, TxInterval: SlowTx, DetectionTime: 900 * ms,
				Sent: &ControlPacket{State: StateDown, Diag: DiagDetectionExpired, DetectMult: 3, MyDisc: localDisc, DesiredMinTx: SlowTx, RequiredMinRx: 300 * ms}},
		},
		"Init expires too": {
			steps: []step{recv(0, from(StateDown)), {at: 900 * ms, expire: true}},
			want:  observed{State: StateDown, Diag: DiagDetectionExpired, TxInterval: SlowTx, DetectionTime: 900 * ms},
		},
		"Down never expires": {
			steps: []step{recv(0, from(StateUp)), {at: time.Hour, expire: true}},
			want:  observed{State: StateDown, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms},
		},
		"remote Down while Up: Down, neighbor signaled": {
			steps: append(up(0), recv(20*ms, from(StateDown))),
			want:  observed{State: StateDown, Diag: DiagNeighborDown, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms},
		},
		"remote AdminDown while Up: Down, neighbor signaled": {
			steps: append(up(0), recv(20*ms, from(StateAdminDown))),
			want:  observed{State: StateDown, Diag: DiagNeighborDown, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms},
		},
		"packet for another discriminator does not take an Up session Down": {
			steps: func() []step {
				p := from(StateDown)
				p.YourDisc = 0x9999
				return append(up(0), recv(20*ms, p))
			}(),
			want: observed{State: StateUp, RemoteDisc: remoteDisc, TxInterval: 300 * ms, DetectionTime: 900 * ms},
		},
		"authenticated packet is discarded": {
			steps: func() []step {
				p := from(StateDown)
				p.AuthPresent = true
				return []step{recv(0, p)}
			}(),
			want: observed{State: StateDown, TxInterval: SlowTx},
		},
		"shutdown: AdminDown, ignores the remote": {
			steps: append(up(0), step{at: 20 * ms, shutdown: true}, recv(30*ms, from(StateDown))),
			want:  observed{State: StateAdminDown, Diag: DiagAdminDown, RemoteDisc: remoteDisc, TxInterval: SlowTx, DetectionTime: 900 * ms},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := NewSession(fast, localDisc, t0)
			s.jitter = func(d time.Duration, _ uint8) time.Duration { return d }
			var last time.Duration
			for _, st := range tc.steps {
				now := t0.Add(st.at)
				switch {
				case st.receive != nil:
					s.Receive(now, *st.receive)
				case st.expire:
					s.Expire(now)
				case st.shutdown:
					s.Shutdown()
				}
				last = st.at
			}
			got := observed{State: s.State(), Diag: s.Diag(), RemoteDisc: s.RemoteDisc(), TxInterval: s.TxInterval(), DetectionTime: s.DetectionTime()}
			if tc.want.Sent != nil {
				if p, ok := s.Transmit(t0.Add(last)); ok {
					got.Sent = &p
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestSessionTiming follows a session's clock: slow packets while Down,
// the fast interval once Up, nothing periodic while the remote asks for
// none, and the Final of a poll sent at once.
func TestSessionTiming(t *testing.T) {
	s := NewSession(fast, localDisc, t0)
	s.jitter = func(d time.Duration, _ uint8) time.Duration { return d * 3 / 4 }
	sendTimes := func(from, until time.Duration) []time.Duration {
		var out []time.Duration
		for now := t0.Add(from); now.Before(t0.Add(until)); now = now.Add(ms) {
			if _, ok := s.Transmit(now); ok {
				out = append(out, now.Sub(t0))
			}
		}
		return out
	}
	if diff := cmp.Diff([]time.Duration{0, 750 * ms, 1500 * ms}, sendTimes(0, 2*time.Second)); diff != "" {
		t.Errorf("Down: (-want +got)\n%s", diff)
	}
	// Up at 2 s: the last packet went at 1.5 s, so the next is due at
	// 1.5 s + 225 ms, that is now.
	s.Receive(t0.Add(2*time.Second), from(StateInit))
	if got := s.Next(); !got.Equal(t0.Add(1725 * ms)) {
		t.Errorf("Next() after going Up = %v, want t0+1.725s", got.Sub(t0))
	}
	s.Receive(t0.Add(2*time.Second), func() ControlPacket { p := from(StateUp); p.Final = true; return p }())
	got := sendTimes(2*time.Second, 2*time.Second+500*ms)
	if diff := cmp.Diff([]time.Duration{2 * time.Second, 2225 * ms, 2450 * ms}, got); diff != "" {
		t.Errorf("Up: (-want +got)\n%s", diff)
	}
	p := from(StateUp)
	p.Poll = true
	if !s.Receive(t0.Add(2100*ms), p) {
		t.Error("Receive(poll) = false, want a packet owed at once")
	}
	if next := s.Next(); next.After(t0.Add(2100 * ms)) {
		t.Errorf("Next() with a Final owed = t0+%v, want at once", next.Sub(t0))
	}
	if f, ok := s.Transmit(t0.Add(2100 * ms)); !ok || !f.Final || f.Poll {
		t.Errorf("Transmit() = %+v, %v; want a Final without Poll", f, ok)
	}
	p = from(StateUp)
	p.RequiredMinRx = 0
	s.Receive(t0.Add(2200*ms), p)
	if _, ok := s.Transmit(t0.Add(10 * time.Second)); ok {
		t.Error("Transmit() sent while the remote asks for no packets")
	}
}

func TestChangeFailure(t *testing.T) {
	cases := map[string]struct {
		change Change
		want   bool
	}{
		"detection time passed":          {Change{From: StateUp, To: StateDown, Diag: DiagDetectionExpired}, true},
		"remote's detection time passed": {Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteDiag: DiagDetectionExpired}, false},
		"remote restarted, FRR's way":    {Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteDiag: DiagNeighborDown}, false},
		"remote restarted its session":   {Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteDiag: DiagNone}, false},
		"remote AdminDown":               {Change{From: StateUp, To: StateDown, Diag: DiagNeighborDown, RemoteDiag: DiagAdminDown}, false},
		"Init expired, never Up":         {Change{From: StateInit, To: StateDown, Diag: DiagDetectionExpired}, false},
		"coming Up":                      {Change{From: StateInit, To: StateUp}, false},
		"shut down here":                 {Change{From: StateUp, To: StateAdminDown, Diag: DiagAdminDown}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.change.Failure(); got != tc.want {
				t.Errorf("Failure() = %v, want %v", got, tc.want)
			}
		})
	}
}
