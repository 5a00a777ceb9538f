package up

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/childproc"
)

// process is one child of `svcnet up`. Children run in their own process
// group and get SIGKILL from the kernel if svcnet dies without stopping
// them (Pdeathsig, through childproc), so no path leaves an orphan behind.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "\n==== %s starting %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := childproc.Start(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// failure describes an unexpected exit with the end of the log.
func (p *process) failure() error {
	status := "exited"
	if p.err != nil {
		status = p.err.Error()
	}
	return fmt.Errorf("%s stopped unexpectedly (%s); last lines of %s:\n%s", p.name, status, p.logPath, tail(p.logPath, 15))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (no log: " + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + string(bytes.Join(lines, []byte("\n  ")))
}

// Restarts of a control-plane child: at most maxRestarts within
// restartWindow, each after restartDelay; past that svcnet up gives up.
const (
	maxRestarts   = 5
	restartWindow = time.Minute
	restartDelay  = time.Second
)

// supervised is a control-plane child that is started again when it exits,
// as a kubelet restarts static Pods: etcd, kube-apiserver and
// kube-controller-manager may crash or be killed without taking `svcnet
// up`, its nodes' rules or their traffic down.
type supervised struct {
	name, bin string
	args      []string
	logPath   string

	mu       sync.Mutex
	cur      *process
	stopping bool
}

// supervise starts a control-plane child under supervision and returns its
// first process; restarts are announced on s.out, and a child that keeps
// failing is reported on s.failed.
func (s *session) supervise(name, bin string, args []string, logPath string) (*process, error) {
	p, err := startProcess(name, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	sv := &supervised{name: name, bin: bin, args: args, logPath: logPath, cur: p}
	s.procs = append(s.procs, sv)
	go sv.run(s.out, s.failed)
	return p, nil
}

func (sv *supervised) run(out io.Writer, failed chan<- *process) {
	var restarts []time.Time
	for {
		sv.mu.Lock()
		p := sv.cur
		sv.mu.Unlock()
		<-p.done
		if sv.isStopping() {
			return
		}
		now := time.Now()
		restarts = slices.DeleteFunc(restarts, func(t time.Time) bool { return now.Sub(t) > restartWindow })
		if len(restarts) >= maxRestarts {
			failed <- p
			return
		}
		restarts = append(restarts, now)
		status := "exited"
		if p.err != nil {
			status = p.err.Error()
		}
		fmt.Fprintf(out, "%s stopped (%s); restarting it\n", sv.name, status)
		time.Sleep(restartDelay)
		sv.mu.Lock()
		if sv.stopping {
			sv.mu.Unlock()
			return
		}
		next, err := startProcess(sv.name, sv.bin, sv.args, sv.logPath)
		if err != nil {
			sv.mu.Unlock()
			failed <- p
			return
		}
		sv.cur = next
		sv.mu.Unlock()
	}
}

func (sv *supervised) isStopping() bool {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.stopping
}

// stop ends supervision, then the current process.
func (sv *supervised) stop(grace time.Duration) {
	sv.mu.Lock()
	sv.stopping = true
	p := sv.cur
	sv.mu.Unlock()
	p.stop(grace)
}
