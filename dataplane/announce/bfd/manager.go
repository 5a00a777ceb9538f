// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bfd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Port is the destination port of single-hop BFD Control packets (RFC
// 5881 §4).
const Port = 3784

// ttl is the TTL (hop limit) sent and required: a packet that crossed
// a router has less (RFC 5881 §5).
const ttl = 255

// Source ports are taken from this range (RFC 5881 §4).
const (
	minSourcePort = 49152
	maxSourcePort = 65535
)

// Peer is the remote end of a session.
type Peer struct {
	Addr netip.Addr
	// Source is the local address to send from; invalid for the
	// kernel's choice by route.
	Source netip.Addr
	Config Config
}

// Change is a session's change of state.
type Change struct {
	Peer     netip.Addr
	From, To State
	// Diag is this end's diagnostic; RemoteDiag the one in the remote's
	// last packet.
	Diag, RemoteDiag Diag
}

// Failure tells whether the change is a failure of the path to the
// peer, which should take down what BFD watches: an Up session Down
// because no packet came for the detection time. A remote that says
// Down is not taken for one: FRR's bfdd restarts a session (Down,
// diagnostic "neighbor signaled session down") when bgpd hands it the
// session's local address, which says nothing of the path, and a
// remote that really lost this end resets its BGP session itself;
// AdminDown is never a failure (RFC 5882 §3.2).
func (c Change) Failure() bool {
	return c.From == StateUp && c.To == StateDown && c.Diag == DiagDetectionExpired
}

// ChangeFunc hears of every state change of a session. It runs on the
// session's goroutine: it must not block for long.
type ChangeFunc func(Change)

// Options are what a Manager needs.
type Options struct {
	// NetNS is the network namespace the sockets are made in; empty for
	// the caller's own.
	NetNS    string
	Log      logr.Logger
	OnChange ChangeFunc
}

// Manager runs one session per peer: a goroutine each with its own
// sending socket, and one listener on port 3784 per IP family that hands
// each received packet to its session.
type Manager struct {
	opts Options

	mu       sync.Mutex
	sessions map[netip.Addr]*runner
	byDisc   map[uint32]*runner
	// listen4 and listen6 are the listeners on port 3784, once a peer
	// of their family needs them.
	listen4, listen6 net.PacketConn
}

// NewManager returns a manager with no sessions.
func NewManager(opts Options) *Manager {
	return &Manager{opts: opts, sessions: map[netip.Addr]*runner{}, byDisc: map[uint32]*runner{}}
}

// runner is one session and what drives it.
type runner struct {
	peer   Peer
	disc   uint32
	cancel context.CancelFunc
	rx     chan ControlPacket
	// state is the session's state for States, under Manager.mu.
	state State
}

// Sync runs a session to each peer, stops those to peers no longer
// there and restarts those whose peer changed. A peer whose sockets
// cannot be opened is left out and returned in the error; Sync tries
// again on its next call.
func (m *Manager) Sync(peers []Peer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[netip.Addr]Peer{}
	for _, p := range peers {
		want[p.Addr] = p
	}
	for addr, r := range m.sessions {
		if w, ok := want[addr]; !ok || w != r.peer {
			m.stopLocked(r)
		}
	}
	var errs []error
	for addr, p := range want {
		if _, ok := m.sessions[addr]; ok {
			continue
		}
		if err := m.startLocked(p); err != nil {
			errs = append(errs, fmt.Errorf("BFD session to %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// States are the sessions' states by peer.
func (m *Manager) States() map[netip.Addr]State {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[netip.Addr]State, len(m.sessions))
	for a, r := range m.sessions {
		out[a] = r.state
	}
	return out
}

// Close stops every session (each says AdminDown to its peer) and the
// listeners.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.sessions {
		m.stopLocked(r)
	}
	for _, l := range []*net.PacketConn{&m.listen4, &m.listen6} {
		if *l != nil {
			_ = (*l).Close()
			*l = nil
		}
	}
}

func (m *Manager) stopLocked(r *runner) {
	r.cancel()
	delete(m.sessions, r.peer.Addr)
	delete(m.byDisc, r.disc)
}

func (m *Manager) startLocked(p Peer) error {
	if err := m.listenLocked(p.Addr); err != nil {
		return err
	}
	conn, err := m.sender(p)
	if err != nil {
		return err
	}
	disc := rand.Uint32()
	for disc == 0 || m.byDisc[disc] != nil {
		disc = rand.Uint32()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{peer: p, disc: disc, cancel: cancel, rx: make(chan ControlPacket, 16), state: StateDown}
	m.sessions[p.Addr], m.byDisc[disc] = r, r
	go m.run(ctx, r, conn)
	return nil
}

// sender is a session's socket: bound to the source address and a port
// of 49152-65535, sending with TTL 255, inside the namespace.
func (m *Manager) sender(p Peer) (*net.UDPConn, error) {
	src := p.Source
	if !src.IsValid() {
		src = netip.IPv4Unspecified()
		if p.Addr.Is6() {
			src = netip.IPv6Unspecified()
		}
	}
	network := "udp4"
	if p.Addr.Is6() {
		network = "udp6"
	}
	var conn *net.UDPConn
	err := netns.Do(m.opts.NetNS, func() error {
		var err error
		for range 100 {
			port := uint16(minSourcePort + rand.IntN(maxSourcePort-minSourcePort+1))
			conn, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, port)))
			if err == nil {
				return nil
			}
		}
		return fmt.Errorf("binding a source port: %w", err)
	})
	if err != nil {
		return nil, err
	}
	if p.Addr.Is4() {
		err = ipv4.NewConn(conn).SetTTL(ttl)
	} else {
		err = ipv6.NewConn(conn).SetHopLimit(ttl)
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("setting TTL %d: %w", ttl, err)
	}
	return conn, nil
}

// listenLocked opens the listener on port 3784 of peer's family if it
// is not open yet, asking the kernel for each packet's TTL (hop limit).
func (m *Manager) listenLocked(peer netip.Addr) error {
	v4 := peer.Is4()
	slot := &m.listen6
	if v4 {
		slot = &m.listen4
	}
	if *slot != nil {
		return nil
	}
	network, addr := "udp6", fmt.Sprintf("[::]:%d", Port)
	if v4 {
		network, addr = "udp4", fmt.Sprintf("0.0.0.0:%d", Port)
	}
	var pc net.PacketConn
	err := netns.Do(m.opts.NetNS, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	// The wrapper remembers which control messages it asked for: reads
	// go through the same one.
	var read readFunc
	if v4 {
		c := ipv4.NewPacketConn(pc)
		err = c.SetControlMessage(ipv4.FlagTTL, true)
		read = func(b []byte) (int, int, net.Addr, error) {
			n, cm, from, err := c.ReadFrom(b)
			if cm == nil {
				return n, 0, from, err
			}
			return n, cm.TTL, from, err
		}
	} else {
		c := ipv6.NewPacketConn(pc)
		err = c.SetControlMessage(ipv6.FlagHopLimit, true)
		read = func(b []byte) (int, int, net.Addr, error) {
			n, cm, from, err := c.ReadFrom(b)
			if cm == nil {
				return n, 0, from, err
			}
			return n, cm.HopLimit, from, err
		}
	}
	if err != nil {
		_ = pc.Close()
		return fmt.Errorf("asking for the TTL of packets on %s: %w", addr, err)
	}
	*slot = pc
	go m.receive(read)
	return nil
}

// readFunc reads one packet with its TTL (hop limit) and source.
type readFunc func(b []byte) (n, hops int, from net.Addr, err error)

// receive reads a listener until it is closed, dropping packets whose
// TTL is not 255 or that fail Parse's checks, and hands the others to
// their session: by Your Discriminator, or by source address while it is
// zero (RFC 5880 §6.8.6, RFC 5881 §3).
func (m *Manager) receive(read readFunc) {
	buf := make([]byte, 1500)
	for {
		n, hops, from, err := read(buf)
		var src netip.Addr
		if u, ok := from.(*net.UDPAddr); ok {
			src = u.AddrPort().Addr().Unmap()
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if hops != ttl {
			m.opts.Log.V(4).Info("Dropping BFD packet with a TTL under 255", "from", src, "ttl", hops)
			continue
		}
		p, err := Parse(buf[:n])
		if err != nil {
			m.opts.Log.V(4).Info("Dropping BFD packet", "from", src, "reason", err.Error())
			continue
		}
		m.mu.Lock()
		r := m.byDisc[p.YourDisc]
		if p.YourDisc == 0 {
			r = m.sessions[src]
		}
		if r != nil && r.peer.Addr != src {
			r = nil
		}
		m.mu.Unlock()
		if r == nil {
			continue
		}
		select {
		case r.rx <- p:
		default:
		}
	}
}

// run drives one session until ctx ends, then sends AdminDown once so
// the peer does not count the stop as a failure.
func (m *Manager) run(ctx context.Context, r *runner, conn *net.UDPConn) {
	defer conn.Close()
	log := m.opts.Log.WithValues("peer", r.peer.Addr)
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.peer.Addr, Port))
	s := NewSession(r.peer.Config, r.disc, time.Now())
	send := func(now time.Time) {
		if p, ok := s.Transmit(now); ok {
			if _, err := conn.WriteTo(p.Marshal(), dst); err != nil {
				log.V(4).Info("Sending BFD packet failed", "err", err.Error())
			}
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		from := s.State()
		select {
		case <-ctx.Done():
			s.Shutdown()
			send(time.Now())
			return
		case p := <-r.rx:
			s.Receive(time.Now(), p)
		case <-timer.C:
		}
		now := time.Now()
		s.Expire(now)
		send(now)
		if to := s.State(); to != from {
			m.changed(r, Change{Peer: r.peer.Addr, From: from, To: to, Diag: s.Diag(), RemoteDiag: s.RemoteDiag()})
		}
		timer.Reset(time.Until(s.Next()))
	}
}

func (m *Manager) changed(r *runner, c Change) {
	m.mu.Lock()
	r.state = c.To
	m.mu.Unlock()
	m.opts.Log.Info("BFD session changed state", "peer", c.Peer, "from", c.From.String(), "to", c.To.String(),
		"diag", c.Diag.String(), "remoteDiag", c.RemoteDiag.String())
	if m.opts.OnChange != nil {
		m.opts.OnChange(c)
	}
}
