package nodesim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// The kubelet's parts for Pods that run Programs: each such container is
// supervised (started, restarted per restartPolicy with the crash
// back-off, probed), and its state is what the Pod's status reports.

const (
	// defaultRestartBackoff and maxRestartBackoff are the kubelet's crash
	// back-off: 10 s, doubled per restart, at most 5 minutes, forgotten
	// after a container ran for backoffReset.
	defaultRestartBackoff = 10 * time.Second
	maxRestartBackoff     = 5 * time.Minute
	backoffReset          = 10 * time.Minute
	// volumeRefresh is how often ConfigMap, Secret and token files are
	// brought up to date in a running Pod.
	volumeRefresh = 10 * time.Second
	// defaultGrace is terminationGracePeriodSeconds' default.
	defaultGrace = 30 * time.Second

	reasonCrashLoop  = "CrashLoopBackOff"
	reasonStartError = "StartError"
	reasonCompleted  = "Completed"
	reasonError      = "Error"
)

// podRuntime holds the supervised containers of one Pod.
type podRuntime struct {
	key    client.ObjectKey
	files  *podFiles
	cancel context.CancelFunc
	wg     sync.WaitGroup
	grace  time.Duration

	mu         sync.Mutex
	containers map[string]*containerState
}

// containerState is what the kubelet knows of one container.
type containerState struct {
	restarts int32
	// running is when the current process started; zero when none runs.
	running time.Time
	// waiting is the reason the container is not running (back-off, or a
	// start that failed); message says more.
	waiting, message string
	// terminated is the final state (restartPolicy said no restart);
	// last is the previous run's end.
	terminated, last *corev1.ContainerStateTerminated
	ready            bool
}

// runtimeEnv is what supervising a Pod's containers needs from the
// simulator.
type runtimeEnv struct {
	c        client.Client
	log      logr.Logger
	now      func() time.Time
	programs []Program
	podsDir  string
	logDir   string
	dns      DNS
	backoff  time.Duration
	// changed asks for the Pod's status to be written again.
	changed func(client.ObjectKey)
}

// startRuntime writes the Pod's files and starts a supervisor for each of
// its Program containers, in netnsPath with address ip.
func (e *runtimeEnv) startRuntime(ctx context.Context, pod *corev1.Pod, netnsPath string, ip netip.Addr) (*podRuntime, error) {
	pod = pod.DeepCopy()
	pod.Status.PodIP = ip.String()
	dir := filepath.Join(e.podsDir, string(pod.UID))
	files := &podFiles{c: e.c, dir: dir, pod: pod, now: e.now, tokens: map[string]time.Time{}}
	if err := e.writePodFiles(ctx, files, ip); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &podRuntime{key: client.ObjectKeyFromObject(pod), files: files, cancel: cancel, containers: map[string]*containerState{},
		grace: time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, int64(defaultGrace/time.Second))) * time.Second}
	for _, c := range pod.Spec.Containers {
		prog, ok := programFor(e.programs, c.Image)
		if !ok {
			continue
		}
		if err := resolveProbePorts(&c); err != nil {
			cancel()
			return nil, err
		}
		st := &containerState{}
		rt.containers[c.Name] = st
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			e.supervise(ctx, rt, pod, c, prog, st, netnsPath)
		}()
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		e.refreshVolumes(ctx, rt)
	}()
	return rt, nil
}

// writePodFiles writes the volumes, resolv.conf, hosts and hostname files.
func (e *runtimeEnv) writePodFiles(ctx context.Context, files *podFiles, ip netip.Addr) error {
	if err := os.MkdirAll(files.dir, 0o755); err != nil {
		return err
	}
	resolv, err := e.dns.resolvConf(files.pod)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"resolv.conf": resolv,
		"hosts":       hostsFile(files.pod, ip.String()),
		"hostname":    []byte(hostname(files.pod) + "\n"),
	} {
		if err := writeAtomic(filepath.Join(files.dir, name), data); err != nil {
			return err
		}
	}
	return files.writeVolumes(ctx)
}

func hostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	return pod.Name
}

// refreshVolumes keeps ConfigMap, Secret and token files current.
func (e *runtimeEnv) refreshVolumes(ctx context.Context, rt *podRuntime) {
	t := time.NewTicker(volumeRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := rt.files.writeVolumes(ctx); err != nil && ctx.Err() == nil {
			e.log.Error(err, "Refreshing the Pod's volumes", "pod", rt.key)
		}
	}
}

// stop ends every container (SIGTERM, then SIGKILL after the grace
// period) and removes the Pod's files.
func (rt *podRuntime) stop() error {
	rt.cancel()
	rt.wg.Wait()
	return os.RemoveAll(rt.files.dir)
}

// supervise runs one container until ctx ends: start, wait, restart per
// the Pod's restartPolicy after the back-off.
func (e *runtimeEnv) supervise(ctx context.Context, rt *podRuntime, pod *corev1.Pod, c corev1.Container, prog Program, st *containerState, netnsPath string) {
	log := e.log.WithValues("pod", rt.key, "container", c.Name)
	for {
		started := e.now()
		exit, err := e.runOnce(ctx, rt, pod, c, prog, st, netnsPath)
		if ctx.Err() != nil {
			return
		}
		finished := e.now()
		term := &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: metav1.NewTime(started), FinishedAt: metav1.NewTime(finished), Reason: reasonCompleted}
		switch {
		case err != nil:
			term.Reason, term.Message = reasonStartError, err.Error()
			log.Error(err, "Starting the container")
		case exit != 0:
			term.Reason = reasonError
			log.Info("Container exited", "exitCode", exit)
		}
		policy := pod.Spec.RestartPolicy
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && exit == 0 && err == nil) {
			rt.update(st, func() { st.running, st.ready, st.terminated = time.Time{}, false, term })
			e.changed(rt.key)
			return
		}
		if finished.Sub(started) >= backoffReset {
			rt.update(st, func() { st.restarts = 0 })
		}
		delay := e.restartDelay(rt, st)
		rt.update(st, func() {
			st.running, st.ready, st.last = time.Time{}, false, term
			st.waiting, st.message = reasonCrashLoop, fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", delay, c.Name, rt.key)
		})
		e.changed(rt.key)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		rt.update(st, func() { st.restarts++ })
	}
}

// restartDelay is the crash back-off before the next start: none for the
// first restart, then backoff doubled per restart, up to the maximum.
func (e *runtimeEnv) restartDelay(rt *podRuntime, st *containerState) time.Duration {
	rt.mu.Lock()
	n := st.restarts
	rt.mu.Unlock()
	if n == 0 {
		return 0
	}
	d := e.backoff
	for i := int32(1); i < n && d < maxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, maxRestartBackoff)
}

// runOnce starts the container, probes it while it runs, and returns its
// exit code; when ctx ends it stops the process first.
func (e *runtimeEnv) runOnce(ctx context.Context, rt *podRuntime, pod *corev1.Pod, c corev1.Container, prog Program, st *containerState, netnsPath string) (int32, error) {
	spec, closeLog, err := e.sandbox(ctx, rt, pod, c, prog, netnsPath)
	if err != nil {
		return 128, err
	}
	defer closeLog()
	p, err := spawn(spec)
	if err != nil {
		return 128, err
	}
	rt.update(st, func() { st.running, st.waiting, st.message, st.terminated = e.now(), "", "", nil })
	e.changed(rt.key)
	runCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	ip := rt.files.pod.Status.PodIP
	go e.probe(runCtx, c.ReadinessProbe, ip, netnsPath, readiness, func(ok bool) {
		if rt.update(st, func() { st.ready = ok }) {
			e.changed(rt.key)
		}
	})
	if c.LivenessProbe != nil {
		go e.probe(runCtx, c.LivenessProbe, ip, netnsPath, liveness, func(ok bool) {
			if !ok {
				e.log.Info("Liveness probe failed, restarting the container", "pod", rt.key, "container", c.Name)
				go p.stop(rt.grace)
			}
		})
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.stop(rt.grace)
	}
	return p.exitCode, nil
}

// sandbox is the container's start: its root, mounts, argv and env.
func (e *runtimeEnv) sandbox(ctx context.Context, rt *podRuntime, pod *corev1.Pod, c corev1.Container, prog Program, netnsPath string) (sandboxSpec, func(), error) {
	envMap, order, err := containerEnv(ctx, e.c, rt.files.pod, c)
	if err != nil {
		return sandboxSpec{}, nil, err
	}
	sec, err := securityFor(pod, c)
	if err != nil {
		return sandboxSpec{}, nil, err
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+envMap[k])
	}
	mounts := []bindMount{
		{Source: filepath.Join(rt.files.dir, "resolv.conf"), Target: "/etc/resolv.conf"},
		{Source: filepath.Join(rt.files.dir, "hosts"), Target: "/etc/hosts"},
		{Source: filepath.Join(rt.files.dir, "hostname"), Target: "/etc/hostname"},
	}
	if len(prog.Entrypoint) > 0 {
		mounts = append(mounts, bindMount{Source: prog.Binary, Target: prog.Entrypoint[0], ReadOnly: true})
	}
	for _, m := range c.VolumeMounts {
		src, err := rt.files.volumeSource(m.Name)
		if err != nil {
			return sandboxSpec{}, nil, fmt.Errorf("volume %q of mount %s: %w", m.Name, m.MountPath, err)
		}
		mounts = append(mounts, bindMount{Source: filepath.Join(src, m.SubPath), Target: m.MountPath, ReadOnly: m.ReadOnly || readOnlyVolume(pod, m.Name)})
	}
	root := filepath.Join(rt.files.dir, "containers", c.Name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return sandboxSpec{}, nil, err
	}
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		return sandboxSpec{}, nil, err
	}
	logPath := filepath.Join(e.logDir, fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, c.Name))
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return sandboxSpec{}, nil, err
	}
	return sandboxSpec{
		NetNS: netnsPath, Root: root, Hostname: hostname(pod), Argv: argv(prog, c, envMap), Env: env,
		Dir: c.WorkingDir, ImageDirs: prog.ImageDirs, Mounts: mounts, Log: log, Security: sec,
	}, func() { log.Close() }, nil
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

// update changes st under the lock; it reports whether st changed.
func (rt *podRuntime) update(st *containerState, f func()) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	before := *st
	f()
	return before != *st
}

// probeKind is what a probe decides: readiness starts unknown (not
// ready), so its first verdict is reported at once; liveness starts
// alive, so only failureThreshold failures in a row report a failure, as
// the kubelet restarts a container only then.
type probeKind int

const (
	readiness probeKind = iota
	liveness
)

// probe runs p against the container every period and reports each
// verdict that flips the result (after successThreshold successes or
// failureThreshold failures). A container without a probe is ready at
// once; an exec or gRPC probe, which the simulator cannot run in the
// program's image, passes after its initial delay.
func (e *runtimeEnv) probe(ctx context.Context, p *corev1.Probe, ip, netnsPath string, kind probeKind, report func(ok bool)) {
	if p == nil {
		report(true)
		return
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(time.Duration(p.InitialDelaySeconds) * time.Second) {
		return
	}
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	succ, fail := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	if p.FailureThreshold == 0 {
		fail = 3
	}
	var okRun, failRun int32
	state := -1 // unknown
	if kind == liveness {
		state = 1
	}
	for {
		ok := e.probeOnce(ctx, p, ip, netnsPath)
		if ok {
			okRun, failRun = okRun+1, 0
		} else {
			okRun, failRun = 0, failRun+1
		}
		switch {
		case ok && okRun >= succ && state != 1:
			state = 1
			report(true)
		case !ok && (failRun >= fail || state == -1) && state != 0:
			state = 0
			report(false)
		}
		if !wait(period) {
			return
		}
	}
}

// probeOnce runs one HTTP GET or TCP probe from the Pod's network
// namespace to its address, as the kubelet does from the node.
func (e *runtimeEnv) probeOnce(ctx context.Context, p *corev1.Probe, ip, netnsPath string) bool {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := netns.DialContext(netnsPath)
	switch {
	case p.HTTPGet != nil:
		h := p.HTTPGet
		host := ip
		if h.Host != "" {
			host = h.Host
		}
		scheme := "http"
		if h.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, portString(h.Port)), h.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		for _, hd := range h.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		tr := &http.Transport{DialContext: dial, DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the kubelet does not verify probe certificates either
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case p.TCPSocket != nil:
		host := ip
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		conn, err := dial(ctx, "tcp", net.JoinHostPort(host, portString(p.TCPSocket.Port)))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	return true
}

// portString is a probe's port; a named port is looked up by the caller
// (resolveProbePorts) before the probe runs.
func portString(p intstr.IntOrString) string {
	if p.Type == intstr.String {
		return p.StrVal
	}
	return strconv.Itoa(p.IntValue())
}

// resolveProbePorts replaces named probe ports by the container's port
// numbers, so that probes dial numbers.
func resolveProbePorts(c *corev1.Container) error {
	var errs []error
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil {
			continue
		}
		var port *intstr.IntOrString
		switch {
		case p.HTTPGet != nil:
			port = &p.HTTPGet.Port
		case p.TCPSocket != nil:
			port = &p.TCPSocket.Port
		default:
			continue
		}
		if port.Type != intstr.String {
			continue
		}
		found := false
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				*port, found = intstr.FromInt32(cp.ContainerPort), true
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("container %s has no port named %q for its probe", c.Name, port.StrVal))
		}
	}
	return errors.Join(errs...)
}

// statuses are the Program containers' states for the Pod's status.
func (rt *podRuntime) statuses(pod *corev1.Pod) map[string]corev1.ContainerStatus {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := map[string]corev1.ContainerStatus{}
	for _, c := range pod.Spec.Containers {
		st := rt.containers[c.Name]
		if st == nil {
			continue
		}
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, RestartCount: st.restarts, Ready: st.ready,
			ContainerID: "svcnet://" + string(pod.UID)[:8] + "-" + c.Name,
		}
		switch {
		case !st.running.IsZero():
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(st.running)}
			cs.Started = ptr.To(true)
		case st.terminated != nil:
			cs.State.Terminated = st.terminated
			cs.Started = ptr.To(false)
		case st.waiting != "":
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: st.waiting, Message: st.message}
			cs.Started = ptr.To(false)
		default:
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			cs.Started = ptr.To(false)
		}
		if st.last != nil {
			cs.LastTerminationState.Terminated = st.last
		}
		out[c.Name] = cs
	}
	return out
}
