// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/childproc"
)

// readyLine is what `svcnet up` prints once everything runs, before its tour.
const readyLine = "The control plane is up"

// stopTimeout bounds svcnet up's clean stop after SIGINT.
const stopTimeout = 3 * time.Minute

// upProcess is a running `svcnet up`.
type upProcess struct {
	cmd *exec.Cmd
	// exited is closed when the process has ended; err is then its result.
	exited chan struct{}
	err    error
	log    *os.File
	// logged is closed when all of its output is in log.
	logged chan struct{}
}

// startUp starts svcnet with args, its output to logPath, and waits until
// it prints readyLine. It fails when svcnet up exits first, after timeout,
// or when ctx ends, and then leaves nothing running.
func startUp(ctx context.Context, svcnet string, args []string, logPath string, timeout time.Duration) (*upProcess, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(svcnet, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := childproc.Start(cmd); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting svcnet up: %w", err)
	}
	up := &upProcess{cmd: cmd, exited: make(chan struct{}), log: log, logged: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(up.logged)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		seen := false
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if !seen && strings.Contains(sc.Text(), readyLine) {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(log, pr)
	}()
	go func() {
		up.err = cmd.Wait()
		pw.Close()
		close(up.exited)
	}()
	select {
	case <-ready:
		return up, nil
	case <-up.exited:
		err = fmt.Errorf("svcnet up exited before it was ready: see %s", logPath)
		if up.err != nil {
			err = fmt.Errorf("svcnet up exited before it was ready (%w): see %s", up.err, logPath)
		}
	case <-time.After(timeout):
		err = fmt.Errorf("svcnet up not ready after %s: see %s", timeout, logPath)
	case <-ctx.Done():
		err = errors.New("interrupted while svcnet up started")
	}
	return nil, errors.Join(err, up.stop())
}

// stop asks svcnet up to stop as Ctrl-C does and waits; it kills it when
// it does not stop in time. svcnet up's own children die with it
// (Pdeathsig). An exit other than the clean stop is an error: a component
// that failed during the run.
func (u *upProcess) stop() error {
	defer func() {
		<-u.logged
		u.log.Close()
	}()
	select {
	case <-u.exited:
		if u.err == nil {
			return errors.New("svcnet up exited during the run (see svcnet-up.log)")
		}
		return fmt.Errorf("svcnet up exited during the run: %w (see svcnet-up.log)", u.err)
	default:
	}
	_ = u.cmd.Process.Signal(os.Interrupt)
	select {
	case <-u.exited:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-u.cmd.Process.Pid, syscall.SIGKILL)
		<-u.exited
		return fmt.Errorf("svcnet up did not stop within %s of SIGINT and was killed", stopTimeout)
	}
	if u.err != nil {
		return fmt.Errorf("svcnet up stopped with an error: %w (see svcnet-up.log)", u.err)
	}
	return nil
}
