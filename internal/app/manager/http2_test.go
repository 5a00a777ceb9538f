// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestHTTP2 asks the webhook and metrics servers of a running manager
// for HTTP/2 in the TLS handshake (ALPN), as the API server's and
// Prometheus' clients may: refused by default, granted with
// --enable-http2.
func TestHTTP2(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	certDir := t.TempDir()
	now := time.Now()
	caCert, caKey, err := certs.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := certs.NewServing(caCert, caKey, "webhook", []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	for name, tc := range map[string]struct {
		flags []string
		want  string
	}{
		"default: HTTP/1.1 only": {want: "http/1.1"},
		"--enable-http2":         {flags: []string{"--enable-http2"}, want: "h2"},
	} {
		t.Run(name, func(t *testing.T) {
			opts := manager.DefaultOptions()
			fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
			opts.AddFlags(fs)
			if err := fs.Parse(tc.flags); err != nil {
				t.Fatal(err)
			}
			ports := make([]int, 2)
			for i := range ports {
				if ports[i], err = testenv.FreePort(); err != nil {
					t.Fatal(err)
				}
			}
			opts.Controllers = controllers.Options{Controllers: []string{controllers.ClusterIPName}}
			opts.MetricsBindAddress = fmt.Sprintf("127.0.0.1:%d", ports[0])
			opts.Webhook.Host, opts.Webhook.Port, opts.Webhook.CertDir = "127.0.0.1", ports[1], certDir
			opts.Webhook.CertManagement = manager.CertManagementExternal
			opts.HealthProbeBindAddress = "0"
			opts.SkipNameValidation = true
			c, err := opts.Complete()
			if err != nil {
				t.Fatal(err)
			}
			mgr, err := manager.New(env.Config, c)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			for server, port := range map[string]int{"metrics": ports[0], "webhook": ports[1]} {
				if got := negotiated(ctx, t, port); got != tc.want {
					t.Errorf("%s server: a client offering h2 and http/1.1 got %q, want %q", server, got, tc.want)
				}
			}
		})
	}
}

// negotiated is the application protocol the server at 127.0.0.1:port
// picks from h2 and http/1.1, once it listens.
func negotiated(ctx context.Context, t *testing.T, port int) string {
	t.Helper()
	var proto string
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}} //nolint:gosec // only the protocol is looked at
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil // not listening yet
		}
		defer conn.Close()
		proto = conn.(*tls.Conn).ConnectionState().NegotiatedProtocol
		return true, nil
	}); err != nil {
		t.Fatalf("no TLS answer from %s: %v", addr, err)
	}
	return proto
}
