// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

var privateNS *privatens.Env

func TestMain(m *testing.M) {
	privateNS = privatens.Enter()
	privateNS.Report("container runtime tests")
	os.Exit(m.Run())
}

// hostLayers share this machine's programs, as the images that list
// hostDirs do.
var hostLayers = Layers{HostDirs: []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/alternatives"}}

// newSpec is a container in the test's own network namespace, logging to
// a file of the test.
func newSpec(t *testing.T, argv ...string) Spec {
	t.Helper()
	dir := t.TempDir()
	log, err := OpenLog(filepath.Join(dir, "log", "0.log"), DefaultLogMaxSize, DefaultLogMaxFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return Spec{
		NetNS: "/proc/self/ns/net", Root: filepath.Join(dir, "root"), Hostname: "web-0",
		Argv: argv, Env: []string{"PATH=" + defaultPath, "GREETING=hello"}, Layers: hostLayers, Log: log,
		Security: Security{Caps: []uintptr{0, 1, 6, 7}},
	}
}

func startOrFail(t *testing.T, spec Spec) *Container {
	t.Helper()
	c, err := Start(spec)
	if err != nil {
		t.Fatalf("starting %v: %v", spec.Argv, err)
	}
	t.Cleanup(func() { c.Stop(time.Second) })
	return c
}

func waitDone(t *testing.T, c *Container) int32 {
	t.Helper()
	select {
	case <-c.Done():
		return c.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("the container did not end")
		return 0
	}
}

// logText is what the CRI log holds, without timestamps.
func logText(t *testing.T, l *LogFile) string {
	t.Helper()
	data, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			out = append(out, f[1]+" "+f[2]+" "+f[3])
		}
	}
	return strings.Join(out, "\n")
}

func TestRunAndLog(t *testing.T) {
	privateNS.Require(t)
	spec := newSpec(t, "sh", "-c", `echo "$GREETING from $(hostname)"; echo oops >&2; ls /proc | grep -c '^[0-9]'; printf partial; exit 3`)
	c := startOrFail(t, spec)
	if code := waitDone(t, c); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	got := logText(t, spec.Log)
	for _, want := range []string{"stdout F hello from web-0", "stderr F oops", "stdout F partial"} {
		if !strings.Contains(got, want) {
			t.Errorf("log misses %q:\n%s", want, got)
		}
	}
	// A PID namespace of its own: the shell and ls's pipeline, not this
	// machine's processes.
	if !strings.Contains(got, "stdout F 3") && !strings.Contains(got, "stdout F 2") {
		t.Errorf("the container sees more than its own processes in /proc:\n%s", got)
	}
}

func TestStartErrors(t *testing.T) {
	privateNS.Require(t)
	_, err := Start(newSpec(t, "no-such-program"))
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("starting an unknown program: %v, want a not found error", err)
	}
}

func TestExec(t *testing.T) {
	privateNS.Require(t)
	spec := newSpec(t, "sleep", "600")
	spec.Security = Security{UID: 1000, GID: 1000}
	c := startOrFail(t, spec)
	var out, errOut bytes.Buffer
	code, err := c.Exec(context.Background(), []string{"sh", "-c", `echo "$(id -u) $(hostname) $$ $GREETING"; cat; echo bad >&2; exit 7`},
		ExecIO{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errOut})
	if err != nil || code != 7 {
		t.Fatalf("exec: code %d, %v; want 7, nil", code, err)
	}
	// The exec's shell is a process of the container's PID namespace
	// (after PID 1, sleep), runs as the container's user, with its
	// environment and hostname.
	if f := strings.Fields(out.String()); len(f) < 6 || f[0] != "1000" || f[1] != "web-0" || f[3] != "hello" || f[2] == "" || len(f[2]) > 3 {
		t.Errorf("exec output %q, want uid 1000, hostname web-0, a small PID, the container's env and stdin", out.String())
	}
	if !strings.Contains(out.String(), "from stdin") || errOut.String() != "bad\n" {
		t.Errorf("exec streams: stdout %q, stderr %q", out.String(), errOut.String())
	}
	var tty bytes.Buffer
	code, err = c.Exec(context.Background(), []string{"sh", "-c", "test -t 0 && test -t 1 && echo terminal"}, ExecIO{Stdout: &tty, TTY: true})
	if err != nil || code != 0 || !strings.Contains(tty.String(), "terminal") {
		t.Errorf("exec with a terminal: code %d, %v, output %q", code, err, tty.String())
	}
	var notFound bytes.Buffer
	if code, err := c.Exec(context.Background(), []string{"no-such-program"}, ExecIO{Stderr: &notFound}); err != nil || code != 126 || !strings.Contains(notFound.String(), "not found") {
		t.Errorf("exec of an unknown program: code %d, %v, stderr %q; want 126 and the reason, as runc", code, err, notFound.String())
	}
	c.Stop(time.Second)
	if _, err := c.Exec(context.Background(), []string{"true"}, ExecIO{}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("exec into a stopped container: %v, want ErrNotRunning", err)
	}
}

func TestAttachStdinOnce(t *testing.T) {
	privateNS.Require(t)
	spec := newSpec(t, "sh", "-c", `echo before; read line; echo "got $line"`)
	spec.Stdin, spec.StdinOnce = true, true
	c := startOrFail(t, spec)
	time.Sleep(200 * time.Millisecond) // "before" is written before anyone attaches: in the log only
	pr, pw := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- c.Attach(context.Background(), ExecIO{Stdin: pr, Stdout: &out}) }()
	_, _ = pw.Write([]byte("abc\n"))
	pw.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end with the container")
	}
	if out.String() != "got abc\n" {
		t.Errorf("attached output %q, want the answer (what came before is in the log)", out.String())
	}
	if got := logText(t, spec.Log); got != "stdout F before\nstdout F got abc" {
		t.Errorf("log %q", got)
	}
}

func TestStopGrace(t *testing.T) {
	privateNS.Require(t)
	// PID 1 without a handler ignores SIGTERM: killed after the grace.
	c := startOrFail(t, newSpec(t, "sleep", "600"))
	start := time.Now()
	c.Stop(500 * time.Millisecond)
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("sleep as PID 1 stopped after %s, before its grace period", d)
	}
	if code := c.ExitCode(); code != 137 {
		t.Errorf("exit code %d, want 137 (SIGKILL)", code)
	}
	// A handler ends it at once.
	c = startOrFail(t, newSpec(t, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done"))
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	c.Stop(5 * time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a program handling SIGTERM stopped after %s", d)
	}
}

func TestLogRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLog(filepath.Join(dir, "0.log"), 200, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := l.Stream(Stdout)
	for range 20 {
		if _, err := w.Write([]byte("0123456789012345678901234567890123456789\n")); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "0.log*"))
	if len(files) != 3 {
		t.Errorf("files after rotation: %v, want 3 (the current one and 2 rotated)", files)
	}
	long := strings.Repeat("x", maxLogLine+10)
	l, _ = OpenLog(filepath.Join(dir, "1.log"), 0, 1, nil)
	w = l.Stream(Stderr)
	_, _ = w.Write([]byte(long + "\n"))
	l.Close()
	data, _ := os.ReadFile(filepath.Join(dir, "1.log"))
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " stderr P ") || !strings.Contains(lines[1], " stderr F xxxxxxxxxx") {
		t.Errorf("a long line is not one partial and one full entry: %d lines", len(lines))
	}
}

// TestWritableLayerUsage checks that what a container writes to its root
// shows in its writable layer's usage, which the simulated kubelet
// compares with the container's ephemeral-storage limit: on an image's
// files (an overlay) and on an empty root (a tmpfs).
func TestWritableLayerUsage(t *testing.T) {
	privateNS.Require(t)
	for name, rootfs := range map[string]func() string{
		"overlay on an image's files": func() string { return t.TempDir() },
		"empty root":                  func() string { return "" },
	} {
		t.Run(name, func(t *testing.T) {
			spec := newSpec(t, "sh", "-c", "dd if=/dev/zero of=/big bs=1M count=8 2>/dev/null; sleep 30")
			spec.Layers.Rootfs = rootfs()
			c := startOrFail(t, spec)
			deadline := time.Now().Add(10 * time.Second)
			for {
				used, err := c.WritableLayerUsage()
				if err != nil {
					t.Fatal(err)
				}
				if used >= 8<<20 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the writable layer holds %d bytes after writing 8 MiB", used)
				}
				time.Sleep(100 * time.Millisecond)
			}
			idleSpec := newSpec(t, "sleep", "30")
			idleSpec.Layers.Rootfs = rootfs()
			idle := startOrFail(t, idleSpec)
			time.Sleep(200 * time.Millisecond)
			if used, err := idle.WritableLayerUsage(); err != nil || used >= 1<<20 {
				t.Errorf("a container that writes nothing: %d bytes, %v; want under 1 MiB", used, err)
			}
		})
	}
}
