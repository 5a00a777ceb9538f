// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Process is a started child whose readiness WaitReady waits for: the
// wait ends as soon as it exits.
type Process interface {
	// Name names the child in errors.
	Name() string
	// LogPath is the child's log file, whose last lines errors show.
	LogPath() string
	// Exited reports whether the process has ended.
	Exited() bool
	// Failure describes its unexpected exit.
	Failure() error
}

// WaitReady polls url until it answers 200, the process exits, or the
// timeout passes.
func WaitReady(ctx context.Context, p Process, url string, caPEM []byte, token string, timeout time.Duration) error {
	tr := &http.Transport{}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return WaitReadyVia(ctx, p, url, tr, token, timeout)
}

// WaitReadyVia is WaitReady with the caller's transport (e.g. one that
// dials inside a node's namespace).
func WaitReadyVia(ctx context.Context, p Process, url string, tr *http.Transport, token string, timeout time.Duration) error {
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true, nil
			}
		}
		if p.Exited() {
			return false, p.Failure()
		}
		return false, nil
	})
	switch {
	case err == nil || ctx.Err() != nil || p.Exited():
		return err
	default:
		return fmt.Errorf("%s not ready at %s after %s; last lines of %s:\n%s", p.Name(), url, timeout, p.LogPath(), Tail(p.LogPath(), 15))
	}
}

// Tail is the last n lines of the log file at path, indented, for an
// error message.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + string(bytes.Join(lines, []byte("\n  ")))
}

// WaitFor polls cond every 50 ms until it holds or timeout passes; the
// error names what it waited for and cond's last error.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
		}
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case last != nil:
		return fmt.Errorf("waiting %s for %s: %w", timeout, what, last)
	default:
		return fmt.Errorf("waited %s for %s", timeout, what)
	}
}
