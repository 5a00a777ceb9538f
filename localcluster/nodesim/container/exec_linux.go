// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TerminalSize is a terminal's width and height, in characters.
type TerminalSize struct {
	Width, Height uint16
}

// ExecIO are an exec's or attach's streams: nil ones are not connected.
// With TTY, the command gets a terminal that Stdout receives (Stderr is
// unused) and Resize sizes.
type ExecIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TerminalSize
}

// execWaitDelay is how long an exec's output is still copied after the
// command ended (a child it left may hold the streams).
const execWaitDelay = time.Second

// Exec runs argv inside the container, as `kubectl exec` does: in its
// namespaces and root, with its environment, user and working folder. It
// returns the command's exit code; an error means it could not run. The
// command is killed if ctx ends first.
func (c *Container) Exec(ctx context.Context, argv []string, eio ExecIO) (int32, error) {
	if len(argv) == 0 {
		return 0, errors.New("no command to run")
	}
	select {
	case <-c.done:
		return 0, ErrNotRunning
	default:
	}
	type result struct {
		code int32
		err  error
	}
	res := make(chan result, 1)
	go func() {
		// Never unlocked: the thread joined the container.
		runtime.LockOSThread()
		code, err := c.execOnThread(ctx, argv, eio)
		res <- result{code, err}
	}()
	r := <-res
	return r.code, r.err
}

func (c *Container) execOnThread(ctx context.Context, argv []string, eio ExecIO) (int32, error) {
	var master, slave *os.File
	if eio.TTY {
		// This machine's terminals, opened before the root changes.
		var err error
		if master, slave, err = pty.Open(); err != nil {
			return 0, fmt.Errorf("opening a terminal: %w", err)
		}
		defer master.Close()
		defer slave.Close()
	}
	if err := c.join(); err != nil {
		return 0, err
	}
	// No parent-death signal: Go's check of it would find no parent seen
	// from inside the PID namespace and kill the command at once. The
	// command dies with the container's PID 1 instead.
	attr := &syscall.SysProcAttr{Setsid: true}
	if err := restrictThread(c.spec.Security, attr); err != nil {
		return 0, err
	}
	path, err := lookPath(argv[0], c.spec.Env)
	if err != nil {
		return notRunnable(eio, err), nil
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Args, cmd.Env, cmd.Dir = argv, c.spec.Env, c.spec.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.WaitDelay = execWaitDelay
	cmd.SysProcAttr = attr
	if eio.TTY {
		return runTTY(cmd, master, slave, eio)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = eio.Stdin, eio.Stdout, eio.Stderr
	if err := cmd.Start(); err != nil {
		return notRunnable(eio, err), nil
	}
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exitCode(exit.ProcessState), nil
		}
		return 0, err
	}
	return 0, nil
}

// notRunnableCode is a container runtime's exit code for a command that
// cannot be run (not found, not executable), which kubectl exec shows.
const notRunnableCode = 126

// notRunnable reports a command that could not start as runc does: the
// reason on the command's stderr, and exit code 126.
func notRunnable(eio ExecIO, err error) int32 {
	w := eio.Stderr
	if w == nil || eio.TTY {
		w = eio.Stdout
	}
	if w != nil {
		fmt.Fprintf(w, "OCI runtime exec failed: exec failed: unable to start container process: %v\n", err)
	}
	return notRunnableCode
}

// join moves the calling (locked) thread into the container: its UTS,
// network, PID (for the children) and mount namespaces, then its root.
func (c *Container) join() error {
	var files []*os.File
	defer func() { closeAll(files) }()
	kinds := []struct {
		name string
		flag int
	}{{"uts", unix.CLONE_NEWUTS}, {"net", unix.CLONE_NEWNET}, {"pid", unix.CLONE_NEWPID}, {"mnt", unix.CLONE_NEWNS}}
	for _, k := range kinds {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", c.pid, k.name))
		if err != nil {
			return ErrNotRunning
		}
		files = append(files, f)
	}
	// Joining a mount namespace needs a filesystem view of the thread's
	// own.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unsharing the thread's filesystem view: %w", err)
	}
	unix.Umask(containerUmask)
	for i, k := range kinds {
		if err := unix.Setns(int(files[i].Fd()), k.flag); err != nil {
			return fmt.Errorf("joining the container's %s namespace: %w", k.name, err)
		}
	}
	if err := unix.Chroot(c.spec.Root); err != nil {
		return fmt.Errorf("entering the container's root: %w", err)
	}
	return unix.Chdir("/")
}

// runTTY runs cmd on the terminal whose ends are master and slave,
// connected to eio.
func runTTY(cmd *exec.Cmd, master, slave *os.File, eio ExecIO) (int32, error) {
	cmd.SysProcAttr.Setctty = true
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	if err := cmd.Start(); err != nil {
		return notRunnable(eio, err), nil
	}
	slave.Close() // the command holds it now; EOF on master when it ends
	go resizeLoop(master, eio.Resize)
	if eio.Stdin != nil {
		go func() { _, _ = io.Copy(master, eio.Stdin) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if eio.Stdout != nil {
			_, _ = io.Copy(eio.Stdout, master)
		} else {
			_, _ = io.Copy(io.Discard, master)
		}
	}()
	err := cmd.Wait()
	select {
	case <-copied:
	case <-time.After(execWaitDelay):
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exitCode(exit.ProcessState), nil
	case err != nil:
		return 0, err
	}
	return 0, nil
}

func resizeLoop(tty *os.File, resize <-chan TerminalSize) {
	if resize == nil {
		return
	}
	for size := range resize {
		_ = pty.Setsize(tty, &pty.Winsize{Cols: size.Width, Rows: size.Height})
	}
}

// Attach connects eio to the container's process, as `kubectl attach`
// does, until the process ends or ctx does: the output from then on, and
// input only when the container keeps its stdin open; the end of a
// stdinOnce container's first client's input closes the process's.
// (kubectl shows what was written before it attached from the log.)
func (c *Container) Attach(ctx context.Context, eio ExecIO) error {
	s := c.streams
	select {
	case <-c.done:
		return ErrNotRunning
	default:
	}
	sub := &subscriber{out: eio.Stdout, err: eio.Stderr}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	stdin := s.stdin
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	if s.tty != nil {
		go resizeLoop(s.tty, eio.Resize)
	}
	if eio.Stdin != nil && stdin != nil {
		go c.feed(eio.Stdin, stdin)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
	}
	return nil
}

// feed copies a client's input to the process; when the client's input
// ends, a stdinOnce container's input is closed.
func (c *Container) feed(in io.Reader, stdin io.Writer) {
	_, _ = io.Copy(stdin, in)
	s := c.streams
	if !s.stdinOnce {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stdin != nil {
		_ = s.stdin.Close()
		s.stdin = nil
	}
}
