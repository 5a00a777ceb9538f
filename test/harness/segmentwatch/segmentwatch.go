// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package segmentwatch listens on a lab's segment for who answers for an
// address (ARP or NDP): the kernel tests' and the failover benchmark's
// witness that never two nodes answer at once.
package segmentwatch

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// Watch is a listener on the nodes' segment: every period it asks
// who has an address (an ARP request, or a Neighbor Solicitation to the
// address's solicited-node group) and records which hardware addresses
// answer each question, so a test can tell that never two nodes answered
// at once and who answers now. Each question is asked from its own
// source address (one of srcSpread after src), which the answers are
// sent to: an answer counts for the question it answers, however late
// it is read, not for the one being asked when it arrives.
type Watch struct {
	addr   netip.Addr
	conn   *packet.Conn
	ifi    *net.Interface
	src    netip.Addr
	period time.Duration
	// srcs are the questions' source addresses, src first; srcIndex
	// their places.
	srcs     []netip.Addr
	srcIndex map[netip.Addr]int

	mu sync.Mutex
	// round counts questions; answers holds the answerers of each, and
	// asked the time each was asked.
	round   int
	answers map[int]map[string]bool
	asked   map[int]time.Time
	last    string
	// changes records each new answerer with the time it first answered.
	changes []answerChange
	stop    chan struct{}
	done    chan struct{}
}

// srcSpread is how many source addresses the questions take in turn: an
// answer is told apart from those of the srcSpread-1 questions before it.
const srcSpread = 64

// srcOf is the source address of question round.
func (w *Watch) srcOf(round int) netip.Addr {
	return w.srcs[round%srcSpread]
}

// roundOf is the latest question asked from src, -1 if none was.
func (w *Watch) roundOf(src netip.Addr) int {
	i, ok := w.srcIndex[src]
	if !ok || w.round < i {
		return -1
	}
	return w.round - (w.round-i)%srcSpread
}

type answerChange struct {
	at time.Time
	hw string
}

// Start starts watching addr from namespace ns's interface iface,
// whose address src it asks from.
func Start(ns, iface string, src, addr netip.Addr, period time.Duration) (*Watch, error) {
	w := &Watch{addr: addr, src: src, period: period, round: -1, answers: map[int]map[string]bool{}, asked: map[int]time.Time{},
		srcIndex: map[netip.Addr]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	for a := src; len(w.srcs) < srcSpread; a = a.Next() {
		w.srcIndex[a] = len(w.srcs)
		w.srcs = append(w.srcs, a)
	}
	proto := int(ethernet.EtherTypeARP)
	if addr.Is6() {
		proto = 0x86DD
	}
	err := netns.Do(netlab.Path(ns), func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		w.ifi = ifi
		w.conn, err = packet.Listen(ifi, packet.Datagram, proto, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	go w.read()
	go w.ask()
	return w, nil
}

func (w *Watch) ask() {
	defer close(w.done)
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		w.mu.Lock()
		w.round++
		round := w.round
		w.asked[round] = time.Now()
		w.mu.Unlock()
		w.send(w.srcOf(round))
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
	}
}

func (w *Watch) send(src netip.Addr) {
	if w.addr.Is4() {
		req, err := arp.NewPacket(arp.OperationRequest, w.ifi.HardwareAddr, src, ethernet.Broadcast, w.addr)
		if err != nil {
			return
		}
		b, _ := req.MarshalBinary()
		_, _ = w.conn.WriteTo(b, &packet.Addr{HardwareAddr: ethernet.Broadcast})
		return
	}
	group, _ := ndp.SolicitedNodeMulticast(w.addr)
	ns := &ndp.NeighborSolicitation{TargetAddress: w.addr, Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: w.ifi.HardwareAddr}}}
	body, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return
	}
	pkt := make([]byte, 40, 40+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:], uint16(len(body)))
	pkt[6], pkt[7] = 58, 255
	copy(pkt[8:24], src.AsSlice())
	copy(pkt[24:40], group.AsSlice())
	g := group.As16()
	mac := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	_, _ = w.conn.WriteTo(append(pkt, body...), &packet.Addr{HardwareAddr: mac})
}

func (w *Watch) read() {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := w.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if hw, to := w.answerer(buf[:n]); hw != "" {
			w.mu.Lock()
			if r := w.roundOf(to); r >= 0 {
				if w.answers[r] == nil {
					w.answers[r] = map[string]bool{}
				}
				w.answers[r][hw] = true
			}
			if hw != w.last {
				w.last = hw
				w.changes = append(w.changes, answerChange{at: time.Now(), hw: hw})
			}
			w.mu.Unlock()
		}
	}
}

// answerer returns who a packet says has the address and the source
// address of the question it answers, if it answers one (gratuitous
// announcements are not answers).
func (w *Watch) answerer(b []byte) (string, netip.Addr) {
	if w.addr.Is4() {
		var p arp.Packet
		if p.UnmarshalBinary(b) != nil || p.Operation != arp.OperationReply || p.SenderIP != w.addr {
			return "", netip.Addr{}
		}
		return p.SenderHardwareAddr.String(), p.TargetIP
	}
	if len(b) < 40 || b[6] != 58 {
		return "", netip.Addr{}
	}
	to := netip.AddrFrom16([16]byte(b[24:40]))
	m, err := ndp.ParseMessage(b[40:])
	na, ok := m.(*ndp.NeighborAdvertisement)
	if err != nil || !ok || na.TargetAddress != w.addr || !na.Solicited {
		return "", netip.Addr{}
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok {
			return lla.Addr.String(), to
		}
	}
	return "", netip.Addr{}
}

// Current is the node that answered last, "" if none yet.
func (w *Watch) Current() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Doubles lists the questions two nodes answered.
func (w *Watch) Doubles() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range slices.Sorted(maps.Keys(w.answers)) {
		if len(w.answers[r]) > 1 {
			out = append(out, fmt.Sprintf("question %d asked at %s: %v", r, w.asked[r].Format("15:04:05.000"), w.answers[r]))
		}
	}
	return out
}

// AnswerWait is how long the watch waits for an answer it expects: an
// address's new owner may serve traffic (its gratuitous announcement
// moved the client's neighbour entry) a question or two before it
// answers one, and on a loaded machine the answer's reading lags more.
const AnswerWait = time.Second

// ChangedTo tells when hw first answered after since, waiting up to
// AnswerWait for it to.
func (w *Watch) ChangedTo(hw string, since time.Time) (time.Time, bool) {
	for end := time.Now().Add(AnswerWait); ; time.Sleep(w.period) {
		if at, ok := w.changedTo(hw, since); ok || time.Now().After(end) {
			return at, ok
		}
	}
}

func (w *Watch) changedTo(hw string, since time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.hw == hw && !c.at.Before(since) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// CurrentIs waits up to AnswerWait for hw to be the last answerer, and
// returns the last answerer then.
func (w *Watch) CurrentIs(hw string) string {
	for end := time.Now().Add(AnswerWait); ; time.Sleep(w.period) {
		if got := w.Current(); got == hw || time.Now().After(end) {
			return got
		}
	}
}

// Rounds is how many questions were asked.
func (w *Watch) Rounds() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.round + 1
}

// AnsweredSince tells whether hw answered a question asked after since.
func (w *Watch) AnsweredSince(hw string, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for r, hws := range w.answers {
		if hws[hw] && !w.asked[r].Before(since) {
			return true
		}
	}
	return false
}

// Close stops the watch.
func (w *Watch) Close() {
	close(w.stop)
	<-w.done
	_ = w.conn.Close()
}
