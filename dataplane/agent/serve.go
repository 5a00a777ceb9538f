// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// listenRetry is the pause between attempts to listen on an address
// another process holds.
const listenRetry = time.Second

// retryingServer serves handler on addr. While the address is taken (by
// kube-proxy still running on the node during a migration, or by the
// agent Pod a DaemonSet is replacing) it logs and tries again every
// listenRetry, as kube-proxy's health and metrics servers do, instead of
// stopping the rules with it. Any other failure to listen is an error
// that names the address.
type retryingServer struct {
	what    string // "Health server", "Metrics server": the log's subject
	addr    string
	handler http.Handler
	log     logr.Logger
	// onListen, if set, is called once the address is held.
	onListen func()
	// onBlocked, if set, is called once when the address is found taken
	// (kube-proxy records an Event on its Node then).
	onBlocked func(error)
	// tls, if set, serves HTTPS.
	tls *tls.Config
}

// Start implements manager.Runnable.
func (s *retryingServer) Start(ctx context.Context) error {
	l, err := s.listen(ctx)
	if err != nil || l == nil {
		return err
	}
	if s.onListen != nil {
		s.onListen()
	}
	if s.tls != nil {
		l = tls.NewListener(l, s.tls)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listen listens on s.addr, retrying while the address is in use; nil
// when ctx ends first.
func (s *retryingServer) listen(ctx context.Context) (net.Listener, error) {
	for logged := false; ; logged = true {
		l, err := net.Listen("tcp", s.addr)
		if err == nil {
			if logged {
				s.log.Info(s.what+" listens", "address", s.addr)
			}
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s: %w", s.what, err)
		}
		if !logged {
			s.log.Error(err, s.what+" cannot listen yet, retrying every second until the address is free", "address", s.addr)
			if s.onBlocked != nil {
				s.onBlocked(err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(listenRetry):
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// agent serves on its own node.
func (s *retryingServer) NeedLeaderElection() bool { return false }
