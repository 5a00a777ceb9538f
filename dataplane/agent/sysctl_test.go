// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
)

// TestConntrackMax checks kube-proxy's arithmetic: per core times CPUs,
// at least the minimum, at most 1M, nothing with 0 per core.
func TestConntrackMax(t *testing.T) {
	for name, tc := range map[string]struct {
		perCore, floor int32
		cpus, want     int
	}{
		"the minimum on few cores":     {32768, 131072, 2, 131072},
		"per core on many cores":       {32768, 131072, 16, 524288},
		"capped at 1M":                 {32768, 131072, 64, 1 << 20},
		"0 per core leaves it":         {0, 131072, 16, 0},
		"per core without a minimum":   {1000, 0, 3, 3000},
		"a minimum above the cap wins": {1, 2 << 20, 1, 2 << 20},
	} {
		t.Run(name, func(t *testing.T) {
			if got := conntrackMax(ConntrackConfig{MaxPerCore: tc.perCore, Min: tc.floor}, tc.cpus); got != tc.want {
				t.Errorf("conntrackMax = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestConntrackSysctls checks which sysctls each setting writes: kube-
// proxy's defaults set the maximum and the two TCP timeouts; tcp_be_liberal
// and the UDP timeouts only when configured.
func TestConntrackSysctls(t *testing.T) {
	defaults := DefaultOptions().Conntrack
	got := conntrackSysctls(defaults, 2)
	want := []conntrackSysctl{
		{"net.netfilter.nf_conntrack_max", 131072},
		{"net.netfilter.nf_conntrack_tcp_timeout_established", 86400},
		{"net.netfilter.nf_conntrack_tcp_timeout_close_wait", 3600},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(conntrackSysctl{})); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	all := ConntrackConfig{TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}
	want = []conntrackSysctl{
		{"net.netfilter.nf_conntrack_tcp_be_liberal", 1},
		{"net.netfilter.nf_conntrack_udp_timeout", 30},
		{"net.netfilter.nf_conntrack_udp_timeout_stream", 120},
	}
	if diff := cmp.Diff(want, conntrackSysctls(all, 2), cmp.AllowUnexported(conntrackSysctl{})); diff != "" {
		t.Errorf("be liberal and UDP (-want +got):\n%s", diff)
	}
}

// fakeSysctl is a sysctl tree in memory; readOnly entries refuse writes
// as a network namespace's nf_conntrack_max does.
type fakeSysctl struct {
	values   map[string]int
	readOnly map[string]bool
	writes   []string
}

func (f *fakeSysctl) Get(name string) (int, error) {
	v, ok := f.values[name]
	if !ok {
		return 0, fs.ErrNotExist
	}
	return v, nil
}

func (f *fakeSysctl) Set(name string, v int) error {
	if f.readOnly[name] {
		return fs.ErrPermission
	}
	f.values[name] = v
	f.writes = append(f.writes, name)
	return nil
}

// TestSetConntrackSysctls checks that right values are left alone, wrong
// ones written, and a read-only one fails the start naming the flag, as
// kube-proxy fails.
func TestSetConntrackSysctls(t *testing.T) {
	sys := &fakeSysctl{values: map[string]int{
		"net.netfilter.nf_conntrack_max":                     131072,
		"net.netfilter.nf_conntrack_tcp_timeout_established": 432000,
		"net.netfilter.nf_conntrack_tcp_timeout_close_wait":  3600,
	}}
	if err := setConntrackSysctls(context.Background(), sys, DefaultOptions().Conntrack, 2, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"net.netfilter.nf_conntrack_tcp_timeout_established"}, sys.writes); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if sys.values["net.netfilter.nf_conntrack_tcp_timeout_established"] != 86400 {
		t.Errorf("established timeout %d, want 86400", sys.values["net.netfilter.nf_conntrack_tcp_timeout_established"])
	}

	sys.readOnly = map[string]bool{"net.netfilter.nf_conntrack_max": true}
	err := setConntrackSysctls(context.Background(), sys, DefaultOptions().Conntrack, 16, logr.Discard())
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "--conntrack-max-per-core") {
		t.Errorf("a read-only nf_conntrack_max that needs changing: %v; want a permission error naming --conntrack-max-per-core", err)
	}
}

// TestConntrackTCPLiberal reads the node's tcp_be_liberal as kube-proxy's
// iptables mode does: set (by --conntrack-tcp-be-liberal or the node's
// owner) means no INVALID drop; unset or unreadable means the drop.
func TestConntrackTCPLiberal(t *testing.T) {
	const name = "net.netfilter.nf_conntrack_tcp_be_liberal"
	for _, tc := range []struct {
		values map[string]int
		want   bool
	}{
		{map[string]int{name: 1}, true},
		{map[string]int{name: 0}, false},
		{map[string]int{}, false},
	} {
		if got := conntrackTCPLiberal(&fakeSysctl{values: tc.values}, logr.Discard()); got != tc.want {
			t.Errorf("sysctls %v: liberal = %v, want %v", tc.values, got, tc.want)
		}
	}
}

// TestIPv6Disabled: IPv6 is proxied only where the kernel has it and it
// is not disabled, as kube-proxy decides.
func TestIPv6Disabled(t *testing.T) {
	const name = "net.ipv6.conf.all.disable_ipv6"
	for _, tc := range []struct {
		values map[string]int
		want   string
	}{
		{map[string]int{name: 0}, ""},
		{map[string]int{name: 1}, "net.ipv6.conf.all.disable_ipv6 is set"},
		{map[string]int{}, "no kernel support for IPv6"},
	} {
		if got := ipv6Disabled(&fakeSysctl{values: tc.values}); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("sysctls %v: %q, want %q", tc.values, got, tc.want)
		}
	}
}
