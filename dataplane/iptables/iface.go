// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Interface is what the Syncer needs of iptables: an atomic --noflush
// restore, and a dump of a table. Exec is the real one; Fake is in memory.
type Interface interface {
	// Restore applies iptables-restore input without flushing chains it
	// does not name.
	Restore(ctx context.Context, data []byte) error
	// Save returns iptables-save output of one table ("filter" or "nat").
	Save(ctx context.Context, table string) ([]byte, error)
	// ChainRules returns the rules of one chain (iptables -S: each
	// "-A CHAIN ..." line); exists is false when the chain is not there.
	ChainRules(ctx context.Context, table, chain string) (rules []string, exists bool, err error)
}

// Exec runs the iptables-restore / iptables-save binaries (ip6tables-* for
// IPv6), optionally inside another network namespace.
type Exec struct {
	family corev1.IPFamily
	// netns is the network namespace the commands run in; empty: the
	// caller's.
	netns string
	// variant picks iptables-nft or iptables-legacy; empty: whichever
	// the system's iptables is.
	variant Variant
}

// NewExec returns the real implementation for a family. A non-empty netns
// (a path such as /run/netns/<name>) runs every command in that network
// namespace, which is how one process programs simulated nodes: the
// command is started from a thread inside the namespace, so it needs no
// nsenter in between (one exec less on every sync).
func NewExec(family corev1.IPFamily, netns string) *Exec {
	return &Exec{family: family, netns: netns}
}

// binary names a command: base is "tables", "tables-save" or
// "tables-restore", after "ip" or "ip6" and before the variant.
func (e *Exec) binary(base string) string {
	prefix := "ip"
	if e.family == corev1.IPv6Protocol {
		prefix = "ip6"
	}
	if e.variant == "" {
		return prefix + base
	}
	tables, rest, _ := strings.Cut(base, "-")
	if rest != "" {
		rest = "-" + rest
	}
	return prefix + tables + "-" + string(e.variant) + rest
}

// Restore implements Interface.
func (e *Exec) Restore(ctx context.Context, data []byte) error {
	cmd := exec.CommandContext(ctx, e.binary("tables-restore"), "--noflush", "--counters", "-w", "5")
	cmd.Stdin = bytes.NewReader(data)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Run(e.netns, cmd); err != nil {
		return fmt.Errorf("%s: %w: %s", e.binary("tables-restore"), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// ChainRules implements Interface.
func (e *Exec) ChainRules(ctx context.Context, table, chain string) ([]string, bool, error) {
	cmd := exec.CommandContext(ctx, e.binary("tables"), "-w", "5", "-t", table, "-S", chain)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := netns.Run(e.netns, cmd)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		// "No chain/target/match by that name", or a table that does
		// not exist (iptables-nft): the chain is not there.
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%s -t %s -S %s: %w: %s", e.binary("tables"), table, chain, err, strings.TrimSpace(stderr.String()))
	}
	var rules []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "-A ") {
			rules = append(rules, line)
		}
	}
	return rules, true, nil
}

// Save implements Interface.
func (e *Exec) Save(ctx context.Context, table string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.binary("tables-save"), "-t", table)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := netns.Run(e.netns, cmd); err != nil {
		return nil, fmt.Errorf("%s -t %s: %w: %s", e.binary("tables-save"), table, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
