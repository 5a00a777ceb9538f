// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/svcnet-io/svcnet/internal/app/agentcmd"
)

// TestKubeProxyCommand checks that the binary called kube-proxy, and
// `svcnet-agent kube-proxy`, take kube-proxy's command line as kubeadm's
// DaemonSet passes it, with the speaker off as kube-proxy has none, while
// `svcnet-agent agent` keeps svcnet's defaults.
func TestKubeProxyCommand(t *testing.T) {
	find := func(argv0 string, args ...string) *cobra.Command {
		t.Helper()
		cmd, _, err := commandFor(argv0).Find(args)
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	for name, tc := range map[string]struct {
		cmd      *cobra.Command
		announce string
	}{
		"kube-proxy binary":       {find("/usr/local/bin/kube-proxy"), "false"},
		"svcnet-agent kube-proxy": {find("/svcnet-agent", "kube-proxy"), "false"},
		"svcnet-agent agent":      {find("/svcnet-agent", "agent"), "true"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.cmd.Name() != agentcmd.KubeProxyName && tc.cmd.Name() != "agent" {
				t.Fatalf("runs %q", tc.cmd.Name())
			}
			if err := tc.cmd.ParseFlags([]string{"--config=/var/lib/kube-proxy/config.conf", "--hostname-override=node-a", "--v=2"}); err != nil {
				t.Errorf("kubeadm's arguments: %v", err)
			}
			if got := tc.cmd.Flags().Lookup("announce").Value.String(); got != tc.announce {
				t.Errorf("--announce defaults to %s, want %s", got, tc.announce)
			}
		})
	}
}

// TestVersionFlag checks kube-proxy's --version on the binary called
// kube-proxy: true and raw print the version and run nothing, false runs
// the agent (here: fails on its missing kubeconfig), and a version to
// report instead is refused.
func TestVersionFlag(t *testing.T) {
	run := func(args ...string) (string, error) {
		cmd := commandFor("/usr/local/bin/kube-proxy")
		var out strings.Builder
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	for _, args := range [][]string{{"--version"}, {"--version=raw"}, {"--version", "--config=/nonexistent/config.conf"}} {
		if out, err := run(args...); err != nil || !strings.HasPrefix(out, "svcnet ") {
			t.Errorf("%q: %q, %v; want the version", args, out, err)
		}
	}
	if _, err := run("--version=v1.2.3"); err == nil || !strings.Contains(err.Error(), "--version=v1.2.3") {
		t.Errorf("--version=v1.2.3: %v, want an error naming it", err)
	}
	if out, err := run("--version=false", "--config=/nonexistent/config.conf"); err == nil || out != "" {
		t.Errorf("--version=false: %q, %v; want the agent to run and fail on its --config", out, err)
	}
}
