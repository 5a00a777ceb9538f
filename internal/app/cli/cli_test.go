// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSiblingPath checks that a hand-over finds its binary beside this
// one, and that without it the error names it and says how to build it.
func TestSiblingPath(t *testing.T) {
	dir := t.TempDir()
	const build = "`make build`"
	if _, err := SiblingPath(dir, "svcnet-up", build); err == nil || !strings.Contains(err.Error(), "make build") ||
		!strings.Contains(err.Error(), "svcnet-up") {
		t.Errorf("without svcnet-up: err = %v, want one that names it and make build", err)
	}
	path := filepath.Join(dir, "svcnet-up")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SiblingPath(dir, "svcnet-up", build); err == nil {
		t.Error("a svcnet-up that is not executable was taken")
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := SiblingPath(dir, "svcnet-up", build); err != nil || got != path {
		t.Errorf("SiblingPath = %q, %v; want %q", got, err, path)
	}
}

// TestHandOver runs a hand-over in a child process (it replaces the
// process it runs in) and checks that the binary beside it got the
// leading arguments, then the user's, flags and --help included.
func TestHandOver(t *testing.T) {
	if os.Getenv("CLI_TEST_HANDOVER") != "" {
		cmd := HandOver("agent", "", "cli-test-sibling", "`make build`", "agent")
		cmd.SetArgs([]string{"--config=/x.conf", "--help"})
		if err := cmd.Execute(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		os.Exit(4) // unreachable after a successful exec
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Join(filepath.Dir(exe), "cli-test-sibling")
	if err := os.WriteFile(sibling, []byte("#!/bin/sh\necho \"$0 $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sibling) })
	child := exec.Command(exe, "-test.run=^TestHandOver$")
	child.Env = append(os.Environ(), "CLI_TEST_HANDOVER=1")
	out, err := child.CombinedOutput()
	if want := sibling + " agent --config=/x.conf --help\n"; err != nil || string(out) != want {
		t.Fatalf("the hand-over ran %q (%v), want %q", out, err, want)
	}
}
