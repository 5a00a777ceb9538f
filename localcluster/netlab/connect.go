// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package netlab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// ServeConnect runs an HTTP CONNECT proxy on the unix socket at socket
// whose connections start inside namespace ns: what kube-apiserver's
// egress selector (proxyProtocol HTTPConnect over uds) dials for its
// "cluster" traffic, webhooks behind a Service included, the way a
// konnectivity server carries it into a real cluster's network. The
// socket goes with the lab.
func (l *Lab) ServeConnect(ns, socket string) error {
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the old socket %s: %w", socket, err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.listeners = append(l.listeners, ln)
	l.mu.Unlock()
	dial := netns.DialContext(Path(ns))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go connect(c, dial)
		}
	}()
	return nil
}

// connectTimeout bounds a CONNECT's dial, as a proxy's would.
const connectTimeout = 10 * time.Second

// connect answers one CONNECT request on c and then relays bytes between
// c and the dialled address until either side ends.
func connect(c net.Conn, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(connectTimeout))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Method != http.MethodConnect {
		fmt.Fprintf(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	up, err := dial(ctx, "tcp", req.Host)
	cancel()
	if err != nil {
		fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\r\n%v", err)
		return
	}
	defer up.Close()
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent behind its request are relayed first.
	relay(c, br, up)
}
