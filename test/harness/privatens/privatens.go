// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package privatens runs a test binary inside fresh network and mount
// namespaces, so that the kernel work of kernel, e2e and benchmark suites
// never reaches the host's own networking. It is test harness code: only
// tests and the benchmark program import it, never bin/svcnet.
package privatens

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv names the environment variable with which CI asks for the
// namespace suites: when it is "1", a suite that cannot run fails instead
// of skipping, so that a green run always means the real packets flowed.
const RequireEnv = "SVCNET_REQUIRE_NETNS"

// reexecMarker tells the re-executed binary that it already runs inside
// the private namespaces.
const reexecMarker = "SVCNET_IN_PRIVATE_NETNS"

// Env is the outcome of Enter: whether the suite runs in its private
// namespaces, and why not.
type Env struct {
	unavailable string
}

// Enter re-executes the current binary inside fresh network and mount
// namespaces (`ip netns` bind mounts then stay private too), unless it
// already runs there. Call it first in TestMain; when it re-executes, it
// exits with the child's status and does not return. When the namespaces
// cannot be made here it returns an Env whose Require skips or, under
// RequireEnv, fails every test.
func Enter() *Env {
	if os.Getenv(reexecMarker) == "1" {
		if err := setup(); err != nil {
			return &Env{unavailable: "setting up the private namespace: " + err.Error()}
		}
		return &Env{}
	}
	if reason := missingPrerequisite(); reason != "" {
		return &Env{unavailable: reason}
	}
	args := append([]string{"--net", "--mount", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), reexecMarker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			os.Exit(exitErr.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "running in a private network namespace:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return nil
}

// Unavailable says why the private namespaces could not be made, or "".
func (e *Env) Unavailable() string { return e.unavailable }

// Required tells whether the caller (CI) asked for the namespace suites to
// run rather than skip.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Require stops t when the suite cannot run here: a skip on a developer's
// machine without root, a failure when RequireEnv asks for the suites.
func (e *Env) Require(t testing.TB) {
	t.Helper()
	if e.unavailable == "" {
		return
	}
	if Required() {
		t.Fatalf("%s=1 but this suite cannot run: %s", RequireEnv, e.unavailable)
	}
	t.Skip(e.unavailable)
}

// Report prints, once per binary, that the suite will be skipped (or fail
// under RequireEnv).
func (e *Env) Report(suite string) {
	if e.unavailable == "" {
		return
	}
	verb := "skipped"
	if Required() {
		verb = "failed (" + RequireEnv + "=1)"
	}
	fmt.Fprintf(os.Stderr, "%s will be %s: %s\n", suite, verb, e.unavailable)
}

func missingPrerequisite() string {
	for _, bin := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			return bin + " is not installed (util-linux, iproute2)"
		}
	}
	if out, err := exec.Command("unshare", "--net", "--mount", "true").CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot create network namespaces here (needs root or user namespaces): %v: %s", err, strings.TrimSpace(string(out)))
	}
	return ""
}

func setup() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, out)
	}
	// A private /run/netns: `ip netns add` mounts land here, not on the host.
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "svcnet-netns", "/run/netns").CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a private /run/netns: %w: %s", err, out)
	}
	// A private /run/svcnet, where svcnet up locks the namespace prefixes
	// it uses: another svcnet up on this machine (in namespaces of its
	// own) does not make this one's prefixes taken.
	if err := os.MkdirAll("/run/svcnet", 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "svcnet-locks", "/run/svcnet").CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a private /run/svcnet: %w: %s", err, out)
	}
	// And a private /etc/netns, where the namespaces' resolv.conf files
	// (for `ip netns exec`) are written.
	if err := os.MkdirAll("/etc/netns", 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "svcnet-etc-netns", "/etc/netns").CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a private /etc/netns: %w: %s", err, out)
	}
	return nil
}
