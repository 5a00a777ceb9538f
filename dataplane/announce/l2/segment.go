// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"k8s.io/utils/clock"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Config is what a Segment needs.
type Config struct {
	// Node is this node's name, as the Node object has it.
	Node string
	// Interface is where the segment answers and heartbeats.
	Interface string
	// NetNS, when set, is the network namespace whose interface it is.
	NetNS string
	// Interval is the heartbeat interval; DeadAfter how long a silent
	// peer counts as alive, and how long the segment listens before it
	// answers after a start or its link coming up.
	Interval, DeadAfter time.Duration
	// Incarnation tells this run's heartbeats from an earlier run's.
	Incarnation uint64
	// LivenessPort, when not zero, is the UDP port of the second path the
	// heartbeats take: unicast to each peer's address on the segment
	// (SetWants), for where raw frames are filtered. A peer heard on
	// either path is alive.
	LivenessPort int
	Log          logr.Logger
	Clock        Clock
	// OnChange is told, from the segment's goroutine, which addresses it
	// took (and from whom, after how long) and which it let go.
	OnChange func(iface string, taken []Takeover, released []netip.Addr)
	// OnHold is told, from the segment's goroutine, the addresses it holds
	// back because it hears no peer while other candidates are Ready in
	// the API, each time that set changes (empty: holding back no more).
	OnHold func(iface string, held []netip.Addr)
}

// Clock is the time a segment runs by (k8s.io/utils/clock's real and fake
// clocks both are one).
type Clock interface {
	clock.WithTicker
	AfterFunc(d time.Duration, f func()) clock.Timer
}

// announceAgain are the delays after a takeover at which the gratuitous
// ARP or unsolicited NA is repeated, in case one is lost.
var announceAgain = []time.Duration{200 * time.Millisecond, time.Second}

// Segment answers for the addresses this node owns on one interface.
type Segment struct {
	cfg  Config
	ifi  *net.Interface
	link *netlink.Handle

	hb, arp, ndp *packet.Conn
	udp          *net.UDPConn // nil without a LivenessPort

	wantsCh chan wantsUpdate
	hbCh    chan received

	mu    sync.RWMutex
	owned map[netip.Addr]bool
	peers int
	held  []netip.Addr

	// Owned by Run.
	seq        uint32
	wants      wantsUpdate
	peerStates map[string]*peerState
	// heardBefore: a peer was heard since the segment opened (see
	// view.holdsBack); kept through link flaps.
	heardBefore bool
	claims      claimHistory
	up          bool
	upSince     time.Time
	leaving     bool
	asm         assembler
	// udpPeers are the peers' addresses on the segment, for the UDP path,
	// as of udpRefreshed.
	udpPeers     []peerAddr
	udpRefreshed time.Time
}

type wantsUpdate struct {
	announcements []string
	wants         []Want
	peers         map[string][]netip.Addr
}

// received is one heartbeat frame or datagram.
type received struct {
	// key tells senders apart for reassembly: a MAC address, or "udp"
	// and the source address.
	key    string
	src    netip.Addr // on the UDP path
	viaUDP bool
	frame  []byte
}

// Open opens the segment's sockets on its interface (inside cfg.NetNS).
// It answers nothing until Run.
func Open(cfg Config) (*Segment, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Segment{
		cfg: cfg, owned: map[netip.Addr]bool{}, peerStates: map[string]*peerState{}, claims: newClaimHistory(),
		wantsCh: make(chan wantsUpdate, 1), hbCh: make(chan received, 64),
	}
	err := netns.Do(cfg.NetNS, func() error {
		ifi, err := net.InterfaceByName(cfg.Interface)
		if err != nil {
			return err
		}
		s.ifi = ifi
		if s.hb, err = packet.Listen(ifi, packet.Datagram, EtherType, nil); err != nil {
			return fmt.Errorf("heartbeat socket: %w", err)
		}
		if s.arp, err = packet.Listen(ifi, packet.Datagram, int(ethernet.EtherTypeARP), nil); err != nil {
			return fmt.Errorf("ARP socket: %w", err)
		}
		if s.ndp, err = listenNDP(ifi); err != nil {
			return fmt.Errorf("NDP socket: %w", err)
		}
		if cfg.LivenessPort != 0 {
			// Without it the frames still work where they pass, and the
			// guard still keeps an isolated node from answering beside
			// the others: no reason to answer nothing at all.
			if s.udp, err = listenUDP(cfg.Interface, cfg.LivenessPort); err != nil {
				cfg.Log.Error(err, "Heartbeats by frames only: the UDP liveness path cannot listen", "interface", cfg.Interface, "port", cfg.LivenessPort)
				s.udp = nil
			}
		}
		s.link, err = netns.NetlinkHandle(cfg.NetNS)
		return err
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("interface %s: %w", cfg.Interface, err)
	}
	return s, nil
}

// Close closes the sockets; the segment answers nothing more.
func (s *Segment) Close() {
	for _, c := range []*packet.Conn{s.hb, s.arp, s.ndp} {
		if c != nil {
			_ = c.Close()
		}
	}
	if s.udp != nil {
		_ = s.udp.Close()
	}
	if s.link != nil {
		s.link.Close()
	}
}

// SetWants gives the segment the announcements this node serves on it,
// the addresses it may answer for, and the candidate peers' addresses
// (their Nodes' InternalIPs) for the UDP path.
func (s *Segment) SetWants(announcements []string, wants []Want, peers map[string][]netip.Addr) {
	u := wantsUpdate{announcements: slices.Sorted(slices.Values(announcements)), wants: wants, peers: peers}
	for {
		select {
		case s.wantsCh <- u:
			return
		default:
		}
		select {
		case <-s.wantsCh: // replace a pending update
		default:
		}
	}
}

// Owned lists the addresses the segment answers for now.
func (s *Segment) Owned() []netip.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.SortedFunc(maps.Keys(s.owned), func(a, b netip.Addr) int { return a.Compare(b) })
}

// HeldBack lists the addresses the segment holds back because it hears
// no peer while other candidates are Ready in the API.
func (s *Segment) HeldBack() []netip.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.held)
}

// Peers is the number of live peers heard on the segment.
func (s *Segment) Peers() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.peers
}

func (s *Segment) owns(a netip.Addr) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.owned[a]
}

// Run heartbeats, listens and answers until ctx ends, then lets go of
// everything.
func (s *Segment) Run(ctx context.Context) {
	defer s.Close()
	go s.readHeartbeats()
	go s.serveARP()
	go s.serveNDP()
	if s.udp != nil {
		go s.readUDP()
	}
	tick := s.cfg.Clock.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	s.checkLink()
	for {
		select {
		case <-ctx.Done():
			// Leaving: a last heartbeat, not ready and claiming nothing,
			// lets the next node take over at once.
			s.leaving = true
			s.apply(map[netip.Addr]bool{})
			s.sendHeartbeat()
			return
		case <-tick.C():
			s.checkLink()
			s.decide()
			s.sendHeartbeat()
		case r := <-s.hbCh:
			s.receive(r)
		case u := <-s.wantsCh:
			s.wants = u
			s.claims.want(u.wants)
			s.refreshUDPPeers()
			s.decide()
		}
	}
}

// checkLink follows the interface's carrier: down, the segment lets go of
// everything and forgets its peers; up again, it listens for a dead
// interval before it answers.
func (s *Segment) checkLink() {
	up := false
	if l, err := s.link.LinkByIndex(s.ifi.Index); err == nil {
		a := l.Attrs()
		up = a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown && a.OperState != netlink.OperNotPresent
	}
	if up && s.cfg.Clock.Since(s.udpRefreshed) >= udpRefreshInterval {
		s.refreshUDPPeers()
	}
	if up == s.up {
		return
	}
	s.up = up
	if up {
		s.upSince = s.cfg.Clock.Now()
		s.cfg.Log.Info("Link up, listening before answering", "interface", s.cfg.Interface, "for", s.cfg.DeadAfter)
		return
	}
	s.cfg.Log.Info("Link down, letting go of every address", "interface", s.cfg.Interface)
	clear(s.peerStates)
	s.claims.forget()
	s.apply(map[netip.Addr]bool{})
}

func (s *Segment) view() view {
	now := s.cfg.Clock.Now()
	return view{
		self: s.cfg.Node, now: now, deadAfter: s.cfg.DeadAfter, peers: s.peerStates, heardBefore: s.heardBefore,
		selfReady: s.up && !s.leaving && now.Sub(s.upSince) >= s.cfg.DeadAfter,
	}
}

func (s *Segment) decide() {
	v := s.view()
	live := 0
	for name := range s.peerStates {
		if v.alive(name) != nil {
			live++
		} else if v.now.Sub(s.peerStates[name].heard) > 10*s.cfg.DeadAfter {
			delete(s.peerStates, name)
		}
	}
	held := heldBack(v, s.wants.wants)
	s.mu.Lock()
	s.peers = live
	current := maps.Clone(s.owned)
	heldChanged := !slices.Equal(held, s.held)
	s.held = held
	s.mu.Unlock()
	s.apply(decide(v, s.wants.wants, current))
	if heldChanged && s.cfg.OnHold != nil {
		s.cfg.OnHold(s.cfg.Interface, held)
	}
}

// udpRefreshInterval is how often the segment looks at its interface's
// addresses again for the UDP path, besides at each change of its wants:
// listing them takes a dump of the node's addresses.
const udpRefreshInterval = 5 * time.Second

// refreshUDPPeers recomputes where the UDP path sends: the wanted peers'
// addresses in the interface's prefixes now.
func (s *Segment) refreshUDPPeers() {
	if s.udp == nil {
		return
	}
	s.udpRefreshed = s.cfg.Clock.Now()
	l, err := s.link.LinkByIndex(s.ifi.Index)
	var onLink []netip.Prefix
	if err == nil {
		onLink, err = onLinkPrefixes(s.link, l)
	}
	if err != nil {
		s.cfg.Log.V(4).Info("Reading the interface's addresses failed", "interface", s.cfg.Interface, "err", err)
		return
	}
	s.udpPeers = udpPeers(s.cfg.Node, s.wants.peers, onLink)
}

// apply makes next the owned set: announces what it took, and after
// letting go of anything tells the peers at once, so that the next owner
// need not wait for the next interval.
func (s *Segment) apply(next map[netip.Addr]bool) {
	s.mu.Lock()
	var taken, released []netip.Addr
	for a := range next {
		if !s.owned[a] {
			taken = append(taken, a)
		}
	}
	for a := range s.owned {
		if !next[a] {
			released = append(released, a)
		}
	}
	s.owned = next
	s.mu.Unlock()
	if len(taken) == 0 && len(released) == 0 {
		return
	}
	for _, a := range released {
		s.claims.released(a)
	}
	s.sendHeartbeat()
	takeovers := make([]Takeover, 0, len(taken))
	for _, a := range taken {
		s.announce(a)
		takeovers = append(takeovers, s.claims.takeover(a, s.cfg.Clock.Now()))
		for _, d := range announceAgain {
			s.cfg.Clock.AfterFunc(d, func() {
				if s.owns(a) {
					s.announce(a)
				}
			})
		}
	}
	if s.cfg.OnChange != nil {
		s.cfg.OnChange(s.cfg.Interface, takeovers, released)
	}
}

func (s *Segment) sendHeartbeat() {
	if !s.up {
		return
	}
	s.seq++
	h := &Heartbeat{
		Node: s.cfg.Node, Incarnation: s.cfg.Incarnation, Seq: s.seq,
		Ready: s.view().selfReady, Leaving: s.leaving, Announcements: s.wants.announcements, Claims: s.Owned(),
	}
	s.sendFrames(h)
	s.sendUDP(h)
}

func (s *Segment) sendFrames(h *Heartbeat) {
	frames, err := h.encode(s.ifi.MTU)
	if err != nil {
		s.cfg.Log.Error(err, "Encoding heartbeat")
		return
	}
	for _, f := range frames {
		if _, err := s.hb.WriteTo(f, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
			s.cfg.Log.V(4).Info("Sending heartbeat failed", "interface", s.cfg.Interface, "err", err)
			return
		}
	}
}

func (s *Segment) readHeartbeats() {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := s.hb.ReadFrom(buf)
		if err != nil {
			return
		}
		hw := ""
		if a, ok := from.(*packet.Addr); ok {
			hw = a.HardwareAddr.String()
		}
		s.hbCh <- received{key: hw, frame: append([]byte(nil), buf[:n]...)}
	}
}

func (s *Segment) receive(r received) {
	h, err := s.asm.add(r.key, r.frame)
	if err != nil || h == nil || h.Node == s.cfg.Node || !s.up {
		return
	}
	if r.viaUDP && !fromPeer(s.udpPeers, r.src, h.Node) {
		s.cfg.Log.V(4).Info("Ignoring a UDP heartbeat from an address that is not the node's", "interface", s.cfg.Interface, "peer", h.Node, "from", r.src)
		return
	}
	p := s.peerStates[h.Node]
	if p == nil {
		p = &peerState{}
		s.peerStates[h.Node] = p
		s.heardBefore = true
		s.cfg.Log.V(2).Info("Heard peer", "interface", s.cfg.Interface, "peer", h.Node, "udp", r.viaUDP)
	} else if p.stale(h) {
		return // heard on the other path already
	}
	now := s.cfg.Clock.Now()
	p.update(h, now)
	s.claims.heard(h, now)
	s.decide()
}
