// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// containerState is what the kubelet knows of one container.
type containerState struct {
	// image is the container's image reference; standIn tells that it is
	// not run for real.
	image   string
	standIn bool
	// restarts counts the restarts; running is when the current process
	// started (zero when none runs), proc the process.
	restarts int32
	running  time.Time
	proc     *container.Container
	// started is set once the startup probe (or the postStart hook)
	// passed; ready by the readiness probe.
	started, ready bool
	// waiting is the reason the container is not running (back-off, a
	// start that failed); message says more.
	waiting, message string
	// terminated is the final state (restartPolicy said no restart);
	// last is the previous run's end.
	terminated, last *corev1.ContainerStateTerminated
	// logs are the log files of the current and the previous run.
	log, previousLog string
}

// update changes a container's state under the Pod's lock and reports
// whether it changed what the status shows.
func (p *Pod) update(st *containerState, f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := summary(st)
	f()
	return before != summary(st)
}

func summary(st *containerState) string {
	return fmt.Sprintf("%d/%v/%v/%v/%s/%s/%p/%p", st.restarts, st.running, st.started, st.ready, st.waiting, st.message, st.terminated, st.last)
}

// run starts the init containers one after the other, then the
// containers, as the kubelet's pod worker does.
func (p *Pod) run() {
	for _, c := range p.pod.Spec.InitContainers {
		if !p.runInit(c) {
			return
		}
	}
	p.mu.Lock()
	p.initialized = true
	p.mu.Unlock()
	p.changed()
	for _, c := range p.pod.Spec.Containers {
		p.wg.Go(func() { p.supervise(c, p.pod.Spec.RestartPolicy) })
	}
}

// runInit runs one init container: to completion, or, for a sidecar
// (restartPolicy Always), until it started. It reports whether the Pod
// goes on.
func (p *Pod) runInit(c corev1.Container) bool {
	st := p.containers[c.Name]
	if ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways {
		p.wg.Go(func() { p.supervise(c, corev1.RestartPolicyAlways) })
		return p.waitStarted(st)
	}
	policy := p.pod.Spec.RestartPolicy
	if policy == corev1.RestartPolicyAlways {
		policy = corev1.RestartPolicyOnFailure // init containers run to completion
	}
	p.supervise(c, policy)
	p.mu.Lock()
	defer p.mu.Unlock()
	ok := st.terminated != nil && st.terminated.ExitCode == 0
	if !ok && p.ctx.Err() == nil {
		p.initFailed = true
	}
	return ok && p.ctx.Err() == nil
}

// waitStarted waits until a sidecar started, or the Pod stops.
func (p *Pod) waitStarted(st *containerState) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		p.mu.Lock()
		started := st.started
		p.mu.Unlock()
		if started {
			return true
		}
		select {
		case <-p.ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// supervise runs one container until the Pod stops or policy says it is
// done: start, wait, restart after the back-off.
func (p *Pod) supervise(c corev1.Container, policy corev1.RestartPolicy) {
	st := p.containers[c.Name]
	img, ok := p.r.Image(c)
	p.update(st, func() { st.image, st.standIn = c.Image, !ok })
	if !ok {
		p.standIn(c, st)
		return
	}
	log := p.r.opts.Log.WithValues("pod", p.key, "container", c.Name)
	for {
		started := p.r.opts.Now()
		exit, err := p.runOnce(c, img, st)
		if p.ctx.Err() != nil {
			return
		}
		finished := p.r.opts.Now()
		term := &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished), Reason: ReasonCompleted}
		switch {
		case err != nil:
			term.Reason, term.Message = ReasonStartError, err.Error()
			log.Error(err, "Starting the container")
		case exit != 0:
			term.Reason = ReasonError
			log.Info("Container exited", "exitCode", exit)
		}
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && exit == 0 && err == nil) || p.isStopping() {
			p.update(st, func() { st.running, st.ready, st.proc, st.terminated = time.Time{}, false, nil, term })
			p.changed()
			return
		}
		if finished.Sub(started) >= BackoffReset {
			p.update(st, func() { st.restarts = 0 })
		}
		delay := p.restartDelay(st)
		p.update(st, func() {
			st.running, st.ready, st.started, st.proc, st.last = time.Time{}, false, false, nil, term
			st.waiting, st.message = ReasonCrashLoop, fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", delay, c.Name, p.key.Name, p.key.Namespace, p.pod.UID)
		})
		p.changed()
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(delay):
		}
		p.update(st, func() { st.restarts++ })
	}
}

func (p *Pod) isStopping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// restartDelay is the crash back-off before the next start: none for the
// first restart, then the back-off doubled per restart, up to the maximum.
func (p *Pod) restartDelay(st *containerState) time.Duration {
	p.mu.Lock()
	n := st.restarts
	p.mu.Unlock()
	if n == 0 {
		return 0
	}
	d := p.r.opts.RestartBackoff
	for i := int32(1); i < n && d < MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRestartBackoff)
}

// runOnce starts the container, runs its hooks and probes while it runs,
// and returns its exit code once it ended (or was stopped).
func (p *Pod) runOnce(c corev1.Container, img images.Image, st *containerState) (int32, error) {
	spec, logFile, err := p.spec(c, img, st)
	if err != nil {
		return 128, err
	}
	defer logFile.Close()
	proc, err := container.Start(spec)
	if err != nil {
		return 128, err
	}
	p.update(st, func() {
		st.running, st.proc, st.waiting, st.message, st.terminated = p.r.opts.Now(), proc, "", "", nil
		st.previousLog, st.log = st.log, logFile.Path()
	})
	p.event(corev1.EventTypeNormal, reasonStarted, actionStartContainer, "Started container %s", c.Name)
	// The start is reported once it is observed (see containerStatus).
	observed := time.AfterFunc(p.r.opts.ObserveDelay, p.changed)
	defer observed.Stop()
	runCtx, stopProbes := context.WithCancel(p.ctx)
	defer stopProbes()
	if p.postStart(runCtx, c, proc) {
		p.startProbes(runCtx, c, st, proc)
	}
	go p.watchEphemeralStorage(runCtx, c, proc)
	select {
	case <-proc.Done():
	case <-p.ctx.Done():
		proc.Stop(GracePeriod(p.pod))
	}
	return proc.ExitCode(), nil
}

// postStart runs the container's postStart hook, which must succeed
// before it counts as started; a failure kills the container.
func (p *Pod) postStart(ctx context.Context, c corev1.Container, proc *container.Container) bool {
	if c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		return true
	}
	if err := p.runHook(ctx, c.Lifecycle.PostStart, proc); err != nil {
		p.event(corev1.EventTypeWarning, reasonFailedPostStart, actionRunHook, "PostStartHook failed: %v", err)
		go proc.Stop(GracePeriod(p.pod))
		return false
	}
	return true
}

// spec is one start of container c: its root, mounts, command, env,
// streams and log file.
func (p *Pod) spec(c corev1.Container, img images.Image, st *containerState) (container.Spec, *container.LogFile, error) {
	envMap, order, err := containerEnv(p.ctx, p.r.opts.Client, p.files.pod, c, img.Config.Env)
	if err != nil {
		return container.Spec{}, nil, err
	}
	sec, err := securityFor(p.pod, c, img)
	if err != nil {
		return container.Spec{}, nil, err
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+envMap[k])
	}
	mounts, err := p.mounts(c)
	if err != nil {
		return container.Spec{}, nil, err
	}
	p.mu.Lock()
	restarts := st.restarts
	p.mu.Unlock()
	logFile, err := container.OpenLog(container.LogPath(p.r.opts.LogDir, p.key.Namespace, p.key.Name, string(p.pod.UID), c.Name, restarts),
		container.DefaultLogMaxSize, container.DefaultLogMaxFiles, p.r.opts.Now)
	if err != nil {
		return container.Spec{}, nil, err
	}
	dir := c.WorkingDir
	if dir == "" {
		dir = img.Config.WorkingDir
	}
	return container.Spec{
		NetNS: p.sandbox.NetNS, Root: filepath.Join(p.files.dir, "containers", fmt.Sprintf("%s-%d", c.Name, restarts)),
		Hostname: podHostname(p.pod, p.sandbox), Argv: argv(img.Config, c, envMap), Env: env, Dir: dir,
		Layers: container.Layers{Rootfs: img.Rootfs, HostDirs: img.HostDirs, Files: img.Files},
		Mounts: mounts, Security: sec,
		Stdin: c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY,
		StopSignal: stopSignal(img.Config.StopSignal), Log: logFile,
	}, logFile, nil
}

// mounts are the container's files from the kubelet: resolv.conf, hosts,
// hostname, and its volume mounts.
func (p *Pod) mounts(c corev1.Container) ([]container.Mount, error) {
	mounts := []container.Mount{
		{Source: filepath.Join(p.files.dir, "resolv.conf"), Target: "/etc/resolv.conf"},
		{Source: filepath.Join(p.files.dir, "hosts"), Target: "/etc/hosts"},
		{Source: filepath.Join(p.files.dir, "hostname"), Target: "/etc/hostname"},
	}
	for _, m := range c.VolumeMounts {
		src, err := p.files.volumeSource(m.Name)
		if err != nil {
			return nil, fmt.Errorf("volume %q of mount %s: %w", m.Name, m.MountPath, err)
		}
		mounts = append(mounts, container.Mount{Source: filepath.Join(src, m.SubPath), Target: m.MountPath, ReadOnly: m.ReadOnly || readOnlyVolume(p.pod, m.Name)})
	}
	return mounts, nil
}

// readOnlyVolume tells whether the kubelet mounts the volume read-only
// whatever the mount says: ConfigMap, Secret, projected, downward API.
func readOnlyVolume(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.ConfigMap != nil || v.Secret != nil || v.Projected != nil || v.DownwardAPI != nil
		}
	}
	return false
}

// signals names the stop signals images use.
var signals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGQUIT": syscall.SIGQUIT, "SIGINT": syscall.SIGINT,
	"SIGKILL": syscall.SIGKILL, "SIGWINCH": syscall.SIGWINCH, "SIGHUP": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1,
}

func stopSignal(name string) syscall.Signal {
	return signals[name] // zero: the runtime's SIGTERM
}
