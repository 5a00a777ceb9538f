// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package trafficload is the traffic a migration runs under, from network
// namespaces to Services: new TCP connections every few milliseconds, a
// long-lived TCP connection with a request on it every 50 ms, and a UDP
// flow (one socket, one conntrack entry) with an exchange every 20 ms. It
// counts what was answered and what failed, and the longest gap between
// two successful new connections. The kernel tests and the e2e tests of
// the moves from kube-proxy and from MetalLB share it.
package trafficload

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// Periods of the flows, and how long one exchange may take.
const (
	NewConnectionPeriod = 5 * time.Millisecond
	KeptRequestPeriod   = 50 * time.Millisecond
	UDPPeriod           = 20 * time.Millisecond
	requestTimeout      = 2 * time.Second
	udpTimeout          = time.Second
)

// Load is a running load; Stop ends it.
type Load struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	closer []func()

	mu sync.Mutex
	r  Result
	// mark is r when the current phase began, phaseGap the longest gap
	// within it (Phase).
	mark     Result
	phaseGap time.Duration
}

// Result is what a load counted: successful exchanges per flow, the
// failures (each with its time and error), and the longest gap between
// two successful new connections of one client.
type Result struct {
	NewOK, KeptOK, UDPOK           int
	NewFailed, KeptBroken, UDPLost []string
	LongestGap                     time.Duration
	// Kept and UDP say whether the load runs those flows.
	Kept, UDP bool
}

// New is a load without flows yet.
func New() *Load {
	ctx, cancel := context.WithCancel(context.Background())
	return &Load{ctx: ctx, cancel: cancel}
}

// KeepConnection keeps one TCP connection to host:80 from network
// namespace ns open, with an HTTP/1.1 request on it every
// KeptRequestPeriod. A failed request means the connection broke.
func (l *Load) KeepConnection(ns, host string) error {
	kept, err := netns.DialContext(netlab.Path(ns))(l.ctx, "tcp", net.JoinHostPort(host, "80"))
	if err != nil {
		return fmt.Errorf("opening the long-lived connection to %s from %s: %w", host, ns, err)
	}
	l.mu.Lock()
	l.r.Kept = true
	l.closer = append(l.closer, func() { _ = kept.Close() })
	l.mu.Unlock()
	rd := bufio.NewReader(kept)
	l.wg.Add(1)
	go l.every(KeptRequestPeriod, func() {
		err := keepAliveGet(kept, rd, host)
		l.record(err, &l.r.KeptOK, &l.r.KeptBroken, nil)
	})
	return nil
}

// UDPFlow exchanges a datagram with addr (ip:port) from network namespace
// ns every UDPPeriod, on one socket. It sends "hostname", which agnhost's
// netexec and the kernel tests' UDP Pods both answer.
func (l *Load) UDPFlow(ns, addr string) error {
	udp, err := netns.DialContext(netlab.Path(ns))(l.ctx, "udp", addr)
	if err != nil {
		return fmt.Errorf("opening the UDP flow to %s from %s: %w", addr, ns, err)
	}
	l.mu.Lock()
	l.r.UDP = true
	l.closer = append(l.closer, func() { _ = udp.Close() })
	l.mu.Unlock()
	buf := make([]byte, 256)
	l.wg.Add(1)
	go l.every(UDPPeriod, func() {
		_ = udp.SetDeadline(time.Now().Add(udpTimeout))
		_, err := udp.Write([]byte("hostname"))
		if err == nil {
			_, err = udp.Read(buf)
		}
		l.record(err, &l.r.UDPOK, &l.r.UDPLost, nil)
	})
	return nil
}

// NewConnections opens a new TCP connection to url from network
// namespace ns every NewConnectionPeriod, one after the other.
func (l *Load) NewConnections(ns, url string) {
	hc := netlab.Client(ns, requestTimeout)
	last := time.Now()
	l.wg.Add(1)
	go l.every(NewConnectionPeriod, func() {
		_, err := netlab.Get(l.ctx, hc, url)
		l.record(err, &l.r.NewOK, &l.r.NewFailed, &last)
	})
}

// every runs f every period until the load stops.
func (l *Load) every(period time.Duration, f func()) {
	defer l.wg.Done()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// record counts one exchange; last, when given, is the time of the
// previous success of the same loop, for the longest gap.
func (l *Load) record(err error, ok *int, failed *[]string, last *time.Time) {
	if l.ctx.Err() != nil {
		return // stopping: the exchange's failure is the load's own
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if err != nil {
		*failed = append(*failed, now.Format("15:04:05.000")+" "+err.Error())
		return
	}
	*ok++
	if last != nil {
		l.r.LongestGap = max(l.r.LongestGap, now.Sub(*last))
		l.phaseGap = max(l.phaseGap, now.Sub(*last))
		*last = now
	}
}

// Snapshot is what the load counted so far.
func (l *Load) Snapshot() Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.r
	r.NewFailed, r.KeptBroken, r.UDPLost = clone(r.NewFailed), clone(r.KeptBroken), clone(r.UDPLost)
	return r
}

// Phase is what the load counted since the previous Phase, or since it
// started: the exchanges, the failures and the longest gap of that span.
// The next phase begins.
func (l *Load) Phase() Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, m := l.r, l.mark
	p := Result{
		NewOK: cur.NewOK - m.NewOK, KeptOK: cur.KeptOK - m.KeptOK, UDPOK: cur.UDPOK - m.UDPOK,
		NewFailed: clone(cur.NewFailed[len(m.NewFailed):]), KeptBroken: clone(cur.KeptBroken[len(m.KeptBroken):]), UDPLost: clone(cur.UDPLost[len(m.UDPLost):]),
		LongestGap: l.phaseGap, Kept: cur.Kept, UDP: cur.UDP,
	}
	l.mark, l.phaseGap = cur, 0
	return p
}

// AnsweredSince says whether every flow of the load has been answered a
// few times since before was taken: 20 new connections, 5 requests on
// the long-lived connection, 5 UDP exchanges.
func (l *Load) AnsweredSince(before Result) bool {
	now := l.Snapshot()
	return now.NewOK > before.NewOK+20 && (!now.Kept || now.KeptOK > before.KeptOK+5) && (!now.UDP || now.UDPOK > before.UDPOK+5)
}

// Stop ends the load, waits for its flows and closes their sockets; it
// returns what the load counted. Stopping twice is stopping once.
func (l *Load) Stop() Result {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		for _, c := range l.closer {
			c()
		}
	})
	return l.Snapshot()
}

// Summary is a one-line account of a result.
func (r Result) Summary() string {
	return fmt.Sprintf("%d new connections (%d failed), %d requests on the long-lived one (%d failed), %d UDP exchanges (%d unanswered); longest gap between successful new connections %s",
		r.NewOK, len(r.NewFailed), r.KeptOK, len(r.KeptBroken), r.UDPOK, len(r.UDPLost), r.LongestGap)
}

// keepAliveGet sends one HTTP/1.1 request on an open connection and reads
// the answer: an error means the connection broke.
func keepAliveGet(c net.Conn, rd *bufio.Reader, host string) error {
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func clone(s []string) []string { return append([]string(nil), s...) }
