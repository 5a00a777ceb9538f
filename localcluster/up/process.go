// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
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
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/kuberuntime"
)

// process is one child of `svcnet up`. Children run in their own process
// group and get SIGKILL from the kernel if svcnet dies without stopping
// them (Pdeathsig, through childproc), so no path leaves an orphan behind.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time
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
	p := &process{name: name, cmd: cmd, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Name names the process in progress lines and errors.
func (p *process) Name() string { return p.name }

// LogPath is the process's log file.
func (p *process) LogPath() string { return p.logPath }

// Exited reports whether the process has ended.
func (p *process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *process) stop(grace time.Duration) {
	if p.Exited() {
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

// status says how the process ended: "exited", or the wait error
// ("signal: killed", "exit status 1").
func (p *process) status() string {
	if p.err != nil {
		return p.err.Error()
	}
	return "exited"
}

// Failure describes an unexpected exit with the end of the log.
func (p *process) Failure() error {
	return fmt.Errorf("%s stopped unexpectedly (%s); last lines of %s:\n%s", p.name, p.status(), p.logPath, controlplane.Tail(p.logPath, 15))
}

// restartPolicy says how a supervised child is started again after it
// exits.
type restartPolicy struct {
	// limit is how many restarts within window the child gets before it
	// is reported on the session's failed channel; 0 restarts it forever.
	limit  int
	window time.Duration
	// delay is the wait before the first restart, doubled after each one
	// up to maxDelay, and back to delay once a process ran resetAfter.
	delay, maxDelay, resetAfter time.Duration
}

var (
	// controlPlaneRestarts: etcd, kube-apiserver, kube-controller-manager
	// and the svcnet manager, restarted a second after they exit, at most
	// five times a minute; past that svcnet up gives up, since a child
	// that keeps failing at start is broken rather than killed.
	controlPlaneRestarts = restartPolicy{limit: 5, window: time.Minute, delay: time.Second, maxDelay: time.Second}
	// nodeProxyRestarts: each node's svcnet agent (or kube-proxy), a
	// DaemonSet Pod on a real node, is restarted as a kubelet restarts a
	// crashed container: forever, with a back-off that doubles up to five
	// minutes and resets after ten minutes of running. It starts at one
	// second rather than the kubelet's ten, so that a failover drill sees
	// its agent back at once.
	nodeProxyRestarts = restartPolicy{delay: time.Second, maxDelay: kuberuntime.MaxRestartBackoff, resetAfter: kuberuntime.BackoffReset}
)

// restartEvent tells about one restart: which child, how it ended, how
// many restarts it had and how long until the next start.
type restartEvent struct {
	name, status string
	restarts     int
	delay        time.Duration
}

func (e restartEvent) String() string {
	return fmt.Sprintf("%s stopped (%s); restarting it in %s (restart %d)", e.name, e.status, e.delay, e.restarts)
}

// supervised is a child that is started again when it exits, as a kubelet
// restarts static Pods and containers: the control plane, the svcnet
// manager and each node's agent may crash or be killed without taking
// `svcnet up`, the other nodes' rules or their traffic down.
type supervised struct {
	name, bin string
	args      []string
	logPath   string
	policy    restartPolicy
	// onRestart, when set, is called before each restart (the agents'
	// Events on their Node).
	onRestart func(restartEvent)

	mu       sync.Mutex
	cur      *process
	stopping bool
}

// supervise starts a control-plane child under supervision and returns
// it and its first process; restarts are announced on s.out, and a child that keeps
// failing is reported on s.failed.
func (s *session) supervise(name, bin string, args []string, logPath string) (*supervised, *process, error) {
	sv, p, err := startSupervised(name, bin, args, logPath, controlPlaneRestarts)
	if err != nil {
		return nil, nil, err
	}
	s.procs = append(s.procs, sv)
	go sv.run(s.out, s.failed)
	return sv, p, nil
}

// startSupervised starts the child's first process; the caller sets
// onRestart if it wants and then runs sv.run.
func startSupervised(name, bin string, args []string, logPath string, policy restartPolicy) (*supervised, *process, error) {
	p, err := startProcess(name, bin, args, logPath)
	if err != nil {
		return nil, nil, err
	}
	return &supervised{name: name, bin: bin, args: args, logPath: logPath, policy: policy, cur: p}, p, nil
}

// run waits for each process of the child to exit and starts the next one
// after the policy's delay, until stop is called or the policy gives up.
func (sv *supervised) run(out io.Writer, failed chan<- *process) {
	var recent []time.Time
	delay, restarts := sv.policy.delay, 0
	for {
		sv.mu.Lock()
		p := sv.cur
		sv.mu.Unlock()
		<-p.done
		if sv.isStopping() {
			return
		}
		now := time.Now()
		if sv.policy.resetAfter > 0 && now.Sub(p.started) >= sv.policy.resetAfter {
			delay = sv.policy.delay
		}
		recent = slices.DeleteFunc(recent, func(t time.Time) bool { return now.Sub(t) > sv.policy.window })
		if sv.policy.limit > 0 && len(recent) >= sv.policy.limit {
			failed <- p
			return
		}
		recent = append(recent, now)
		restarts++
		ev := restartEvent{name: sv.name, status: p.status(), restarts: restarts, delay: delay}
		fmt.Fprintln(out, ev)
		if sv.onRestart != nil {
			sv.onRestart(ev)
		}
		if !sv.restartAfter(delay, failed, p) {
			return
		}
		delay = min(2*delay, sv.policy.maxDelay)
	}
}

// restartAfter starts the next process after delay; false when
// supervision ended (stopped, or the start failed and was reported).
func (sv *supervised) restartAfter(delay time.Duration, failed chan<- *process, last *process) bool {
	time.Sleep(delay)
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.stopping {
		return false
	}
	next, err := startProcess(sv.name, sv.bin, sv.args, sv.logPath)
	if err != nil {
		failed <- last
		return false
	}
	sv.cur = next
	return true
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
