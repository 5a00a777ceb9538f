package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Interface is what the Syncer needs of iptables: an atomic --noflush
// restore, and a dump of a table. Exec is the real one; Fake is in memory.
type Interface interface {
	// Restore applies iptables-restore input without flushing chains it
	// does not name.
	Restore(ctx context.Context, data []byte) error
	// Save returns iptables-save output of one table ("filter" or "nat").
	Save(ctx context.Context, table string) ([]byte, error)
}

// Exec runs the iptables-restore / iptables-save binaries (ip6tables-* for
// IPv6), optionally inside another network namespace.
type Exec struct {
	family corev1.IPFamily
	// wrap prefixes every command, e.g. nsenter --net=<path>.
	wrap []string
}

// NewExec returns the real implementation for a family. A non-empty netns
// (a path such as /run/netns/<name>) runs every command in that network
// namespace through nsenter, which is how one process programs simulated
// nodes.
func NewExec(family corev1.IPFamily, netns string) *Exec {
	e := &Exec{family: family}
	if netns != "" {
		e.wrap = []string{"nsenter", "--net=" + netns, "--"}
	}
	return e
}

func (e *Exec) binary(base string) string {
	if e.family == corev1.IPv6Protocol {
		return "ip6" + base
	}
	return "ip" + base
}

func (e *Exec) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append(append(append([]string{}, e.wrap...), name), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// Restore implements Interface.
func (e *Exec) Restore(ctx context.Context, data []byte) error {
	cmd := e.command(ctx, e.binary("tables-restore"), "--noflush", "--counters", "-w", "5")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", e.binary("tables-restore"), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Save implements Interface.
func (e *Exec) Save(ctx context.Context, table string) ([]byte, error) {
	cmd := e.command(ctx, e.binary("tables-save"), "-t", table)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w: %s", e.binary("tables-save"), table, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
