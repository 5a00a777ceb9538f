// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestWaitForAPIServer: connections refused at first (the node cannot
// reach the API server yet), then /healthz failing, then answering: the
// wait ends once it answers 200. One that never answers ends the wait
// with an error naming it.
func TestWaitForAPIServer(t *testing.T) {
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var asked atomic.Int32
	srv := &http.Server{Addr: addr, ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) < 3 {
			http.Error(w, "etcd not ready", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})}
	listenAfter := 1500 * time.Millisecond
	go func() {
		time.Sleep(listenAfter)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() { _ = srv.Close() })

	start := time.Now()
	if err := manager.WaitForAPIServer(context.Background(), &rest.Config{Host: "http://" + addr}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < listenAfter || asked.Load() != 3 {
		t.Errorf("waited %s and asked /healthz %d times; want at least %s and 3 times (refused, 500, 500, 200)", took, asked.Load(), listenAfter)
	}

	closed, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	err = manager.WaitForAPIServer(context.Background(), &rest.Config{Host: fmt.Sprintf("http://127.0.0.1:%d", closed)}, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "did not answer /healthz within 2s") {
		t.Errorf("an API server that never answers: %v", err)
	}
}
