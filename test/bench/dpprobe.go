// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The datapath benchmark's client and server run as child processes of
// the benchmark (this same binary, started inside their namespaces), so
// that the CPU they and the kernel spend on their behalf is measured
// apart from everything else on the machine: on veth, a packet sent is
// carried through the node's rules and to the server in the softirq of
// the sending thread, which the kernel counts as that process's system
// time.
var (
	dpRole     = flag.String("datapath-role", "", "internal: run as the datapath benchmark's client or server")
	dpTarget   = flag.String("datapath-target", "", "internal: address:port the datapath client connects to")
	dpProto    = flag.String("datapath-proto", "tcp", "internal: tcp (new connections) or udp (one-datagram exchanges)")
	dpCount    = flag.Int("datapath-count", 0, "internal: sequential exchanges; 0 runs -datapath-parallel clients for -datapath-duration")
	dpParallel = flag.Int("datapath-parallel", 4, "internal: parallel clients")
	dpDuration = flag.Duration("datapath-duration", 4*time.Second, "internal: how long parallel clients run")
	dpLimit    = flag.Int("datapath-limit", 50000, "internal: most exchanges of a parallel run")
	dpPort     = flag.Int("datapath-port", agentPort, "internal: port the datapath server listens on")
)

// probeResult is what a datapath client reports.
type probeResult struct {
	// Latencies of the successful exchanges, in nanoseconds.
	Latencies []int64 `json:"latencies"`
	Failures  int     `json:"failures"`
	Seconds   float64 `json:"seconds"`
	// UserCPU and SystemCPU are the client process's, in seconds, over
	// the measured exchanges only.
	UserCPU   float64 `json:"userCPU"`
	SystemCPU float64 `json:"systemCPU"`
}

// runDatapathRole runs the role -datapath-role names and exits.
func runDatapathRole() {
	var err error
	switch *dpRole {
	case "server":
		err = dpServe(*dpPort)
	case "client":
		var res probeResult
		res, err = dpProbe(*dpTarget, *dpProto, *dpCount, *dpParallel, *dpDuration, *dpLimit)
		if err == nil {
			err = json.NewEncoder(os.Stdout).Encode(res)
		}
	default:
		err = fmt.Errorf("unknown -datapath-role %q", *dpRole)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench datapath:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// dpServe accepts TCP connections (and closes them) and answers UDP
// datagrams from the address they were sent to, on every address the
// namespace owns, until its standard input closes.
func dpServe(port int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	for range 2 {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					continue
				}
				_ = c.Close()
			}
		}()
	}
	pc, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	// The server owns a whole range through a local route: the answer must
	// leave from the address the datagram reached, or conntrack cannot
	// match it with the client's flow.
	p := ipv4.NewPacketConn(pc)
	if err := p.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, cm, from, err := p.ReadFrom(buf)
			if err != nil {
				return
			}
			var reply *ipv4.ControlMessage
			if cm != nil {
				reply = &ipv4.ControlMessage{Src: cm.Dst}
			}
			_, _ = p.WriteTo(buf[:n], reply, from)
		}
	}()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// dpExchange makes one new connection (TCP: connect, then a reset so that
// no TIME_WAIT is left) or one datagram exchange (UDP) with a socket of
// its own, and returns how long it took.
type dpExchange func() (time.Duration, error)

func newExchange(target, proto string) (dpExchange, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return nil, err
	}
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	switch proto {
	case "tcp":
		return func() (time.Duration, error) {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &unix.Timeval{Sec: 1})
			start := time.Now()
			err = unix.Connect(fd, sa)
			return time.Since(start), err
		}, nil
	case "udp":
		payload := []byte("svcnet datapath benchmark")
		return func() (time.Duration, error) {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return 0, err
			}
			defer unix.Close(fd)
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
			buf := make([]byte, 64)
			start := time.Now()
			if err := unix.Connect(fd, sa); err != nil {
				return 0, err
			}
			if _, err := unix.Write(fd, payload); err != nil {
				return 0, err
			}
			if _, err := unix.Read(fd, buf); err != nil {
				return 0, err
			}
			return time.Since(start), nil
		}, nil
	}
	return nil, fmt.Errorf("unknown protocol %q", proto)
}

func rusageSeconds() (user, sys float64) {
	var r unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r)
	return float64(r.Utime.Nano()) / 1e9, float64(r.Stime.Nano()) / 1e9
}

// dpProbe runs count exchanges one after the other (count > 0), or
// parallel clients for duration, at most limit exchanges.
func dpProbe(target, proto string, count, parallel int, duration time.Duration, limit int) (probeResult, error) {
	var res probeResult
	ex, err := newExchange(target, proto)
	if err != nil {
		return res, err
	}
	runtime.LockOSThread()
	// Warm up: caches, and the first connection's ARP.
	for range 200 {
		_, _ = ex()
	}
	u0, s0 := rusageSeconds()
	start := time.Now()
	if count > 0 {
		res.Latencies = make([]int64, 0, count)
		for range count {
			d, err := ex()
			if err != nil {
				res.Failures++
				if res.Failures >= 20 && len(res.Latencies) == 0 {
					return res, fmt.Errorf("%d %s exchanges with %s failed, none succeeded: %w", res.Failures, proto, target, err)
				}
				continue
			}
			res.Latencies = append(res.Latencies, d.Nanoseconds())
		}
	} else {
		var mu sync.Mutex
		var done atomic.Int64
		var wg sync.WaitGroup
		deadline := start.Add(duration)
		for range parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				var lat []int64
				fails := 0
				for time.Now().Before(deadline) && done.Add(1) <= int64(limit) {
					d, err := ex()
					if err != nil {
						fails++
						continue
					}
					lat = append(lat, d.Nanoseconds())
				}
				mu.Lock()
				res.Latencies = append(res.Latencies, lat...)
				res.Failures += fails
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	res.Seconds = time.Since(start).Seconds()
	u1, s1 := rusageSeconds()
	res.UserCPU, res.SystemCPU = u1-u0, s1-s0
	slices.Sort(res.Latencies)
	return res, nil
}
