// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/cpuset"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// conntrackMaxCap is kube-proxy's cap on nf_conntrack_max from
// --conntrack-max-per-core, against excessive memory on many cores.
const conntrackMaxCap = 1 << 20

// conntrackHashsize is the global conntrack hash table size, raised with
// nf_conntrack_max as kube-proxy raises it.
const conntrackHashsize = "/sys/module/nf_conntrack/parameters/hashsize"

// sysctl is a node's sysctl tree: /proc/sys for the agent's own network
// namespace, where the net.netfilter entries are per namespace.
type sysctl interface {
	Get(name string) (int, error)
	Set(name string, value int) error
}

// procSysctl reads and writes /proc/sys from inside the network namespace
// at netns ("" for the agent's own): a thread sees the net sysctls of its
// own network namespace.
type procSysctl struct {
	root  string
	netns string
}

func (p procSysctl) path(name string) string {
	return filepath.Join(p.root, strings.ReplaceAll(name, ".", "/"))
}

func (p procSysctl) Get(name string) (int, error) {
	var v int
	err := netns.Do(p.netns, func() error {
		b, err := os.ReadFile(p.path(name))
		if err != nil {
			return err
		}
		v, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return v, err
}

func (p procSysctl) Set(name string, value int) error {
	return netns.Do(p.netns, func() error {
		return os.WriteFile(p.path(name), []byte(strconv.Itoa(value)), 0o644)
	})
}

// conntrackSysctl is one conntrack setting and its sysctl.
type conntrackSysctl struct {
	name  string
	value int
}

// conntrackSysctls are the values cfg sets, in kube-proxy's order, each
// only when configured (zero leaves the node's value), as its
// pkg/proxy/conntrack SetSysctls.
func conntrackSysctls(c ConntrackConfig, numCPU int) []conntrackSysctl {
	var out []conntrackSysctl
	if m := conntrackMax(c, numCPU); m > 0 {
		out = append(out, conntrackSysctl{"net.netfilter.nf_conntrack_max", m})
	}
	seconds := func(name string, d time.Duration) {
		if d > 0 {
			out = append(out, conntrackSysctl{name, int(d / time.Second)})
		}
	}
	seconds("net.netfilter.nf_conntrack_tcp_timeout_established", c.TCPEstablishedTimeout)
	seconds("net.netfilter.nf_conntrack_tcp_timeout_close_wait", c.TCPCloseWaitTimeout)
	if c.TCPBeLiberal {
		out = append(out, conntrackSysctl{"net.netfilter.nf_conntrack_tcp_be_liberal", 1})
	}
	seconds("net.netfilter.nf_conntrack_udp_timeout", c.UDPTimeout)
	seconds("net.netfilter.nf_conntrack_udp_timeout_stream", c.UDPStreamTimeout)
	return out
}

// conntrackMax is nf_conntrack_max as kube-proxy computes it: per core
// times the node's CPUs, at least --conntrack-min, at most 1M; 0 (leave
// it) when --conntrack-max-per-core is 0.
func conntrackMax(c ConntrackConfig, numCPU int) int {
	if c.MaxPerCore <= 0 {
		return 0
	}
	scaled := int(c.MaxPerCore) * numCPU
	switch {
	case scaled > conntrackMaxCap:
		return conntrackMaxCap
	case scaled > int(c.Min):
		return scaled
	default:
		return int(c.Min)
	}
}

// nodeCPUs counts the node's online CPUs, not the process's cpuset:
// nf_conntrack_max is for the whole node (kube-proxy's detectNumCPU).
func nodeCPUs() int {
	if n, err := cpuset.NumCPU(); err == nil && n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// setConntrackSysctls sets the node's conntrack sysctls from cfg at
// start, as kube-proxy does: a value already right is not written, and a
// value that cannot be written fails the start, as in kube-proxy (a
// network namespace other than the host's has a read-only
// nf_conntrack_max: run with --conntrack-max-per-core=0 there, as kind
// does).
func setConntrackSysctls(ctx context.Context, sys sysctl, c ConntrackConfig, numCPU int, log logr.Logger) error {
	var errs []error
	for _, s := range conntrackSysctls(c, numCPU) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cur, err := sys.Get(s.name); err == nil && cur == s.value {
			continue
		}
		log.Info("Setting sysctl", "name", s.name, "value", s.value)
		if err := sys.Set(s.name, s.value); err != nil {
			errs = append(errs, fmt.Errorf("setting %s to %d (%s): %w", s.name, s.value, conntrackFlag(s.name), err))
		}
	}
	return errors.Join(errs...)
}

// conntrackFlag names the flag behind a sysctl, for errors.
func conntrackFlag(name string) string {
	switch strings.TrimPrefix(name, "net.netfilter.nf_conntrack_") {
	case "max":
		return "--conntrack-max-per-core and --conntrack-min; 0 per core leaves it"
	case "tcp_timeout_established":
		return "--conntrack-tcp-timeout-established"
	case "tcp_timeout_close_wait":
		return "--conntrack-tcp-timeout-close-wait"
	case "tcp_be_liberal":
		return "--conntrack-tcp-be-liberal"
	case "udp_timeout":
		return "--conntrack-udp-timeout"
	default:
		return "--conntrack-udp-timeout-stream"
	}
}

// raiseConntrackHashsize raises the global conntrack hash size to a
// quarter of nf_conntrack_max when it is smaller, as kube-proxy does.
func raiseConntrackHashsize(c ConntrackConfig, numCPU int, log logr.Logger) error {
	m := conntrackMax(c, numCPU)
	if m == 0 {
		return nil
	}
	b, err := os.ReadFile(conntrackHashsize)
	if err != nil {
		return fmt.Errorf("reading the conntrack hash size: %w", err)
	}
	size, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("reading the conntrack hash size: %w", err)
	}
	if size >= m/4 {
		return nil
	}
	log.Info("Setting conntrack hashsize", "hashsize", m/4)
	if err := os.WriteFile(conntrackHashsize, []byte(strconv.Itoa(m/4)), 0o640); err != nil {
		return fmt.Errorf("setting the conntrack hash size to %d: %w", m/4, err)
	}
	return nil
}

// setupNodeConntrack is the agent's node hygiene at start: the conntrack
// sysctls of cfg in its network namespace, then the hash size.
func setupNodeConntrack(ctx context.Context, cfg Config, log logr.Logger) error {
	cpus := nodeCPUs()
	if err := setConntrackSysctls(ctx, procSysctl{root: "/proc/sys", netns: cfg.NetNS}, cfg.Conntrack, cpus, log); err != nil {
		return fmt.Errorf("setting conntrack sysctls (kube-proxy's conntrack settings): %w", err)
	}
	return raiseConntrackHashsize(cfg.Conntrack, cpus, log)
}
