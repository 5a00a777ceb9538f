// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeimages

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// image is an image.json as hack/node-images/build.sh writes it.
type image struct {
	Repositories []string `json:"repositories"`
	Config       struct {
		Entrypoint []string
		Cmd        []string
		Env        []string
		WorkingDir string
		User       string
		StopSignal string
	} `json:"config"`
	HostDirs []string `json:"hostDirs"`
}

// container is an image's root, assembled in the test's mount namespace,
// and the image's config.
type container struct {
	root   string
	layers string // the writable layers' tmpfs
	image  image
}

// Timeouts of the commands run in containers and of waiting for servers.
const (
	commandTimeout = 10 * time.Second
	serverTimeout  = 10 * time.Second
)

// devices are bound from the machine into every container's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom"}

// assemble builds image name's root as the node simulator does and
// removes it when t ends.
func assemble(t *testing.T, name string) *container {
	t.Helper()
	requireImages(t)
	dir := filepath.Join(imagesDir, name)
	raw, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		t.Fatal(err)
	}
	var img image
	if err := json.Unmarshal(raw, &img); err != nil {
		t.Fatalf("%s/image.json: %v", name, err)
	}
	rootfs, err := filepath.Abs(filepath.Join(dir, "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	return assembleFrom(t, rootfs, img)
}

// assembleFrom builds a root of the files in rootfs and img's hostDirs.
func assembleFrom(t *testing.T, rootfs string, img image) *container {
	t.Helper()
	c := &container{image: img}
	base := t.TempDir()
	if err := unix.Mount("tmpfs", base, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(base, unix.MNT_DETACH) })
	c.root, c.layers = filepath.Join(base, "root"), filepath.Join(base, "layers")
	if err := os.Mkdir(c.layers, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.overlay(c.root, rootfs); err != nil {
		t.Fatalf("the image's root: %v", err)
	}
	for _, d := range c.image.HostDirs {
		if err := c.hostDir(rootfs, d); err != nil {
			t.Fatalf("hostDir %s: %v", d, err)
		}
	}
	if err := c.runtimeFiles(); err != nil {
		t.Fatal(err)
	}
	return c
}

// overlay mounts lowers (the first on top) at target under a writable
// layer of its own.
func (c *container) overlay(target string, lowers ...string) error {
	layer, err := os.MkdirTemp(c.layers, "layer")
	if err != nil {
		return err
	}
	upper, work := filepath.Join(layer, "upper"), filepath.Join(layer, "work")
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), upper, work)
	return unix.Mount("overlay", target, "overlay", 0, opts)
}

// hostDir puts the machine's folder d at d in the root, under the image's
// own files there; a link here is the same link there, and then the image
// must have nothing at d.
func (c *container) hostDir(rootfs, d string) error {
	target := filepath.Join(c.root, d)
	if link, err := os.Readlink(d); err == nil {
		if _, err := os.Lstat(filepath.Join(rootfs, d)); err == nil {
			return fmt.Errorf("the image has %s, a link to %s on this machine", d, link)
		}
		return os.Symlink(link, target)
	}
	lowers := []string{d}
	if fi, err := os.Stat(filepath.Join(rootfs, d)); err == nil && fi.IsDir() {
		lowers = []string{filepath.Join(rootfs, d), d}
	}
	return c.overlay(target, lowers...)
}

// runtimeFiles adds what a runtime and the kubelet put into every root:
// /proc, /dev with the usual devices and links, /etc/hosts and
// /etc/resolv.conf (the test's DNS server, see dns_test.go).
func (c *container) runtimeFiles() error {
	for _, d := range []string{"proc", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(c.root, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("proc", filepath.Join(c.root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	dev := filepath.Join(c.root, "dev")
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, d := range devices {
		if err := os.WriteFile(filepath.Join(dev, d), nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, filepath.Join(dev, d), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", d, err)
		}
	}
	links := map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	etc := map[string]string{
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"resolv.conf": "nameserver 127.0.0.1\n",
	}
	for name, content := range etc {
		if err := os.WriteFile(filepath.Join(c.root, "etc", name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// argv is what a container runs: a Pod's command replaces the image's
// entrypoint (and its cmd), its args replace the cmd.
func (c *container) argv(command, args []string) []string {
	ep, cmd := c.image.Config.Entrypoint, c.image.Config.Cmd
	if len(command) > 0 {
		ep, cmd = command, nil
	}
	if len(args) > 0 {
		cmd = args
	}
	return append(append([]string{}, ep...), cmd...)
}

// lookPath finds name as the container does: a path as it is, a bare
// name in the image's PATH, both resolved inside the root.
func (c *container) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range c.image.Config.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	rootFD, err := unix.Open(c.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(rootFD)
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		fd, err := unix.Openat2(rootFD, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			continue
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		_ = unix.Close(fd)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in the image's PATH %q", name, path)
}

// command prepares argv to run in the container: chrooted, in the image's
// environment and working folder, in a process group of its own.
func (c *container) command(ctx context.Context, argv []string) (*exec.Cmd, error) {
	path, err := c.lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Args, cmd.Env, cmd.Dir = argv, c.image.Config.Env, c.image.Config.WorkingDir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: c.root, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd, nil
}

// run runs argv to its end and returns its output (stdout and stderr) and
// exit code.
func (c *container) run(t *testing.T, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd, err := c.command(ctx, argv)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return string(out), exitErr.ExitCode()
	case err != nil:
		t.Fatalf("running %q: %v: %s", argv, err, out)
	}
	return string(out), 0
}

// output runs argv, which must succeed, and returns its output.
func (c *container) output(t *testing.T, argv ...string) string {
	t.Helper()
	out, code := c.run(t, argv...)
	if code != 0 {
		t.Fatalf("%q exited %d: %s", argv, code, out)
	}
	return out
}

// process is a program started in a container, running until it ends or
// the test does.
type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer // stdout
	err  *syncBuffer // stderr
	done chan struct{}
}

// start starts argv in the container; it is killed when t ends.
func (c *container) start(t *testing.T, argv ...string) *process {
	t.Helper()
	cmd, err := c.command(context.Background(), argv)
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, out: &syncBuffer{}, err: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %q: %v", argv, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%q stdout:\n%s\nstderr:\n%s", argv, p.out, p.err)
		}
	})
	return p
}

// stop sends sig to the process and waits for it to end; it returns the
// exit code (128+N when signal N ended it).
func (p *process) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling %v: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(commandTimeout):
		t.Fatalf("still running %v after %v", sig, commandTimeout)
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// signalNumber is the number of a StopSignal such as SIGQUIT.
func signalNumber(t *testing.T, name string) syscall.Signal {
	t.Helper()
	sig := unix.SignalNum(name)
	if sig == 0 {
		t.Fatalf("unknown signal %q", name)
	}
	return sig
}

// syncBuffer is a bytes.Buffer that a process writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
