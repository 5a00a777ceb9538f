// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulatorPath checks that `svcnet up` finds svcnet-up beside svcnet,
// and that without it the error says how to build it.
func TestSimulatorPath(t *testing.T) {
	dir := t.TempDir()
	if _, err := simulatorPath(dir); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("without svcnet-up: err = %v, want one that names make build", err)
	}
	path := filepath.Join(dir, simulatorBinary)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := simulatorPath(dir); err == nil {
		t.Error("a svcnet-up that is not executable was taken")
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := simulatorPath(dir); err != nil || got != path {
		t.Errorf("simulatorPath = %q, %v; want %q", got, err, path)
	}
}
