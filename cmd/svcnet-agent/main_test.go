// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
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
