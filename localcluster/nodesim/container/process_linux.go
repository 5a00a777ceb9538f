// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// Container is a started container: its PID 1 and standard streams.
type Container struct {
	spec Spec
	pid  int
	// done is closed once the process exited and its output was written.
	done     chan struct{}
	exitCode int32
	streams  *streams
}

// ErrNotRunning is returned by Exec and Attach when the container's
// process is gone.
var ErrNotRunning = errors.New("container is not running")

// Start starts spec's process as PID 1 of a new container and returns
// once the program runs; an error says why it could not (a bad command
// included), with no process left behind.
func Start(spec Spec) (*Container, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no command specified: the container has no command and the image no entrypoint")
	}
	st, childIO, err := newStreams(spec)
	if err != nil {
		return nil, err
	}
	c := &Container{spec: spec, done: make(chan struct{}), streams: st}
	started := make(chan error, 1)
	go c.run(childIO, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// run makes the sandbox on a thread of its own, starts the init from it
// and waits for the process; the thread is never given back to the Go
// runtime (it is the container's parent: its death kills the container).
func (c *Container) run(childIO []*os.File, started chan<- error) {
	runtime.LockOSThread()
	cmd, status, err := c.prepare(childIO)
	closeAll(childIO)
	if err == nil {
		err = waitExec(status)
	}
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		c.streams.closeOutput()
		started <- err
		return
	}
	c.pid = cmd.Process.Pid
	started <- nil
	_ = cmd.Wait()
	c.exitCode = exitCode(cmd.ProcessState)
	c.streams.drain()
	close(c.done)
}

// prepare enters the container's namespaces on this thread, builds its
// root and starts the init.
func (c *Container) prepare(childIO []*os.File) (*exec.Cmd, *os.File, error) {
	spec := c.spec
	netns, err := os.Open(spec.NetNS)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the network namespace: %w", err)
	}
	defer netns.Close()
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_NEWUTS); err != nil {
		return nil, nil, fmt.Errorf("creating the container's mount namespace: %w", err)
	}
	// A new mount namespace gives the thread a filesystem view of its own
	// (CLONE_NEWNS implies CLONE_FS), umask included: the root is built,
	// and the program runs, under the umask a runtime gives a container
	// (OCI's 0022), whatever this machine's is.
	unix.Umask(containerUmask)
	// Nothing mounted from here on propagates back to this machine.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, nil, fmt.Errorf("making the mounts private: %w", err)
	}
	if err := buildRoot(spec); err != nil {
		return nil, nil, err
	}
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return nil, nil, fmt.Errorf("setting the hostname: %w", err)
		}
	}
	if err := unix.Setns(int(netns.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, nil, fmt.Errorf("entering the network namespace: %w", err)
	}
	cfg, err := json.Marshal(initConfig{Root: spec.Root, Dir: spec.Dir, Argv: spec.Argv, Env: spec.Env, Security: spec.Security})
	if err != nil {
		return nil, nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer statusW.Close()
	cmd := &exec.Cmd{
		Path: "/proc/self/exe", Args: []string{"svcnet-container-init"},
		Env:   []string{initEnv + "=" + string(cfg)},
		Stdin: childIO[0], Stdout: childIO[1], Stderr: childIO[2],
		ExtraFiles:  []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL, Setsid: true, Setctty: spec.TTY},
	}
	if err := cmd.Start(); err != nil {
		statusR.Close()
		return nil, nil, fmt.Errorf("starting the container's init: %w", err)
	}
	return cmd, statusR, nil
}

// waitExec reads the init's status pipe: nothing before it closes means
// the program runs.
func waitExec(status *os.File) error {
	defer status.Close()
	msg, err := io.ReadAll(status)
	if err != nil {
		return err
	}
	if len(msg) > 0 {
		return errors.New(string(msg))
	}
	return nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

func exitCode(st *os.ProcessState) int32 {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(st.ExitCode())
}

// PID is the container's PID 1 as this machine numbers it.
func (c *Container) PID() int { return c.pid }

// Done is closed when the process exited and its output was written.
func (c *Container) Done() <-chan struct{} { return c.done }

// ExitCode is the process's exit status, or 128+N when signal N ended it,
// as container runtimes report; valid once Done is closed.
func (c *Container) ExitCode() int32 { return c.exitCode }

// Signal sends sig to the container's PID 1 (which, in its own PID
// namespace, gets only the signals it handles, and SIGKILL).
func (c *Container) Signal(sig syscall.Signal) {
	_ = syscall.Kill(c.pid, sig)
}

// Stop asks the program to stop with its stop signal and kills the
// container once grace has passed, as a container runtime does; it
// returns when the process is gone.
func (c *Container) Stop(grace time.Duration) {
	sig := c.spec.StopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	c.Signal(sig)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	c.Signal(syscall.SIGKILL)
	<-c.done
}

// streams are the container's standard streams: its output is written to
// the log and to attached clients; its input, when it has one, comes from
// attached clients.
type streams struct {
	log  *LogFile
	outs []*os.File // the simulator's ends of stdout/stderr, or the terminal
	tty  *os.File   // the terminal's master, with spec.TTY
	wg   sync.WaitGroup

	mu sync.Mutex
	// stdin is the simulator's end of the process's input; nil without
	// spec.Stdin or once closed.
	stdin     io.WriteCloser
	stdinOnce bool
	subs      map[*subscriber]struct{}
}

type subscriber struct {
	out, err io.Writer
}

// newStreams makes the pipes (or terminal) of spec's process and returns
// the child's ends: stdin, stdout, stderr.
func newStreams(spec Spec) (*streams, []*os.File, error) {
	s := &streams{log: spec.Log, stdinOnce: spec.StdinOnce, subs: map[*subscriber]struct{}{}}
	if spec.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return nil, nil, fmt.Errorf("opening the container's terminal: %w", err)
		}
		s.tty, s.outs = master, []*os.File{master}
		if spec.Stdin {
			s.stdin = nopCloser{master}
		}
		s.pump(master, Stdout)
		return s, []*os.File{slave, dup(slave), dup(slave)}, nil
	}
	child := make([]*os.File, 3)
	if spec.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		child[0], s.stdin = r, w
	}
	for i, stream := range []string{Stdout, Stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(child)
			return nil, nil, err
		}
		child[i+1] = w
		s.outs = append(s.outs, r)
		s.pump(r, stream)
	}
	return s, child, nil
}

func dup(f *os.File) *os.File {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), f.Name())
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// pump copies one output of the process to the log and the attached
// clients until the process's end closes it.
func (s *streams) pump(r *os.File, stream string) {
	var logw io.WriteCloser
	if s.log != nil {
		logw = s.log.Stream(stream)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				data := buf[:n]
				if logw != nil {
					_, _ = logw.Write(data)
				}
				s.broadcast(stream, data)
			}
			if err != nil {
				break
			}
		}
		if logw != nil {
			_ = logw.Close()
		}
	}()
}

func (s *streams) broadcast(stream string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		sub.write(stream, data)
	}
}

func (sub *subscriber) write(stream string, data []byte) {
	w := sub.out
	if stream == Stderr {
		w = sub.err
	}
	if w != nil {
		_, _ = w.Write(data)
	}
}

// drain waits until the outputs are written after the process ended; a
// terminal whose other end a leftover process holds is cut after a while.
func (s *streams) drain() {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		for _, f := range s.outs {
			f.Close()
		}
		<-done
	}
	s.closeOutput()
}

// closeOutput closes the simulator's ends of the streams.
func (s *streams) closeOutput() {
	for _, f := range s.outs {
		f.Close()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stdin != nil {
		_ = s.stdin.Close()
		s.stdin = nil
	}
}
