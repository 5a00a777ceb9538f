// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agentcmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svcnet-io/svcnet/internal/kubeadm"
)

// TestCheckKubeProxyArgs completes kube-proxy's arguments as the agent
// would: kubeadm's own are accepted, what svcnet ignores is named, and
// what it refuses fails with the setting named.
func TestCheckKubeProxyArgs(t *testing.T) {
	config := func(changes map[string]any) string {
		t.Helper()
		data, err := kubeadm.KubeProxyConfig(changes)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "config.conf")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg, err := CheckKubeProxyArgs([]string{"--config=" + config(nil), "--hostname-override=node-1", "--v=2"})
	if err != nil {
		t.Fatalf("kubeadm's kube-proxy: %v", err)
	}
	if cfg.Mode != "iptables" || cfg.NodeName != "node-1" {
		t.Errorf("kubeadm's kube-proxy: mode %q node %q, want iptables on node-1", cfg.Mode, cfg.NodeName)
	}

	cfg, err = CheckKubeProxyArgs([]string{"--hostname-override=node-1", "--profiling"})
	if err != nil || !slices.ContainsFunc(cfg.Ignored, func(s string) bool { return strings.HasPrefix(s, "--profiling") }) {
		t.Errorf("--profiling: ignored %q, err %v; want it named as ignored", cfg.Ignored, err)
	}

	for args, want := range map[string]string{
		"--config=" + config(map[string]any{"mode": "ipvs"}) + " --hostname-override=node-1": `"ipvs" is a kube-proxy mode that svcnet does not implement`,
		"--hostname-override=node-1 --no-such-flag":                                          "unknown flag: --no-such-flag",
		"--hostname-override=node-1 stray":                                                   `unexpected arguments ["stray"]`,
	} {
		if _, err := CheckKubeProxyArgs(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", args, err, want)
		}
	}
}
