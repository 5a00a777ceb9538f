// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package netlab

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

var privateNS *privatens.Env

func TestMain(m *testing.M) {
	privateNS = privatens.Enter()
	privateNS.Report("netlab tests")
	os.Exit(m.Run())
}

// ServeConnect relays a CONNECT to an address only its namespace reaches,
// and answers 502 for one that nothing serves.
func TestServeConnect(t *testing.T) {
	privateNS.Require(t)
	lab, err := New(fmt.Sprintf("svcnet-nl%04d", rand.IntN(10000)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	server, err := lab.AddClient("server", netip.MustParsePrefix("172.31.9.2/24"))
	if err != nil {
		t.Fatal(err)
	}
	origin, err := lab.AddClient("origin", netip.MustParsePrefix("172.31.9.3/24"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := netns.Listen(Path(server), "172.31.9.2:8080")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "from the server namespace") }))
	}()
	t.Cleanup(func() { ln.Close() })
	socket := filepath.Join(t.TempDir(), "egress.sock")
	if err := lab.ServeConnect(origin, socket); err != nil {
		t.Fatal(err)
	}

	c, br, status := connectVia(t, socket, "172.31.9.2:8080")
	defer c.Close()
	if status != http.StatusOK {
		t.Fatalf("CONNECT to the server: %d", status)
	}
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "from the server namespace" {
		t.Errorf("through the tunnel: %q", body)
	}

	refused, _, status := connectVia(t, socket, "172.31.9.2:9999")
	defer refused.Close()
	if status != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %d, want %d", status, http.StatusBadGateway)
	}
}

// connectVia sends CONNECT addr on the proxy's socket and returns the
// connection, its reader and the proxy's status code.
func connectVia(t *testing.T, socket, addr string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", addr)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp.StatusCode
}
