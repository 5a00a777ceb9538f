// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// ruleMonitor follows a node's nf_tables changes as the kernel announces
// them (`nft monitor rules`): iptables-restore on the nf_tables backend,
// svcnet's and kube-proxy's alike, commits each transaction at once and
// the monitor sees its rules as they land. Watching costs nothing while
// nothing changes, unlike reading the rules or probing them with requests,
// whose load slows what is being measured.
type ruleMonitor struct {
	cmd *exec.Cmd

	mu      sync.Mutex
	changed *sync.Cond
	lines   []ruleLine
	err     error
}

type ruleLine struct {
	at   time.Time
	text string
}

func monitorRules(ctx context.Context, ns string) (*ruleMonitor, error) {
	// stdbuf: nft writes its events through stdio, block-buffered on a pipe.
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+netlab.Path(ns), "stdbuf", "-oL", "nft", "monitor", "rules")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nft monitor in %s: %w", ns, err)
	}
	m := &ruleMonitor{cmd: cmd}
	m.changed = sync.NewCond(&m.mu)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			now := time.Now()
			m.mu.Lock()
			m.lines = append(m.lines, ruleLine{at: now, text: sc.Text()})
			m.changed.Broadcast()
			m.mu.Unlock()
		}
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exited")
		}
		m.mu.Lock()
		m.err = fmt.Errorf("nft monitor in %s ended: %w", ns, err)
		m.changed.Broadcast()
		m.mu.Unlock()
	}()
	return m, nil
}

// waitAdded waits until a rule added at or after since contains every one
// of words, and returns when it was seen.
func (m *ruleMonitor) waitAdded(since time.Time, timeout time.Duration, words ...string) (time.Time, error) {
	deadline := time.AfterFunc(timeout, func() {
		m.mu.Lock()
		m.changed.Broadcast()
		m.mu.Unlock()
	})
	defer deadline.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := 0; ; {
		for ; i < len(m.lines); i++ {
			l := m.lines[i]
			if l.at.Before(since) || !strings.HasPrefix(l.text, "add rule ") {
				continue
			}
			// A trailing space lets a word end with one, as a whole chain
			// name at the end of the line.
			if containsAll(l.text+" ", words) {
				return l.at, nil
			}
		}
		if m.err != nil {
			return time.Time{}, m.err
		}
		if time.Since(since) > timeout {
			return time.Time{}, fmt.Errorf("no rule with %q added within %s", words, timeout)
		}
		m.changed.Wait()
	}
}

// forget drops the lines seen before t.
func (m *ruleMonitor) forget(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lines = dropBefore(m.lines, func(l ruleLine) time.Time { return l.at }, t)
}

// dropBefore returns a copy of xs, in time order, without the elements
// seen before t.
func dropBefore[T any](xs []T, at func(T) time.Time, t time.Time) []T {
	i := 0
	for i < len(xs) && at(xs[i]).Before(t) {
		i++
	}
	return append([]T(nil), xs[i:]...)
}

func (m *ruleMonitor) stop() {
	if m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
	}
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
