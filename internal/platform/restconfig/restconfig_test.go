// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package restconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

// TestLoad checks the file, --master over its server, and errors naming
// the flag.
func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path, "")
	if err != nil || cfg.Host != "https://10.0.0.1:6443" || cfg.BearerToken != "t" {
		t.Errorf("Load(file): %+v, %v", cfg, err)
	}
	cfg, err = Load(path, "https://10.0.0.2:6443")
	if err != nil || cfg.Host != "https://10.0.0.2:6443" {
		t.Errorf("Load(file, master): host %q, %v; want --master's", cfg.Host, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), ""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("a missing file: %v, want an error naming --kubeconfig", err)
	}
	cfg, err = Load("", "https://10.0.0.3:6443")
	if err != nil || cfg.Host != "https://10.0.0.3:6443" {
		t.Errorf("Load(master): %+v, %v", cfg, err)
	}
}
