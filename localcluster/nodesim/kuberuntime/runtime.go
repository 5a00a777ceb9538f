// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

const (
	// defaultRestartBackoff is the kubelet's first crash back-off,
	// doubled per restart.
	defaultRestartBackoff = 10 * time.Second
	// MaxRestartBackoff bounds the kubelet's crash back-off; svcnet up
	// restarts its node agents under the same bound.
	MaxRestartBackoff = 5 * time.Minute
	// BackoffReset is how long a container must run before its back-off
	// is forgotten, as the kubelet's.
	BackoffReset = 10 * time.Minute
	// volumeRefresh is how often ConfigMap, Secret and token files are
	// brought up to date in a running Pod.
	volumeRefresh = 10 * time.Second
	// defaultGrace is terminationGracePeriodSeconds' default.
	defaultGrace = 30 * time.Second
	// minStopGrace is what a container is left after its preStop hook
	// used up the grace period, as the kubelet leaves it.
	minStopGrace = 2 * time.Second
)

// Reasons of container states, as the kubelet writes them.
const (
	ReasonCrashLoop        = "CrashLoopBackOff"
	ReasonStartError       = "StartError"
	ReasonCompleted        = "Completed"
	ReasonError            = "Error"
	ReasonCreating         = "ContainerCreating"
	ReasonPodInitializing  = "PodInitializing"
	ReasonPostStartHook    = "PostStartHookError"
	reasonFailedPostStart  = "FailedPostStartHook"
	reasonFailedPreStop    = "FailedPreStopHook"
	reasonUnhealthy        = "Unhealthy"
	reasonKilling          = "Killing"
	reasonStarted          = "Started"
	reasonStandIn          = "StandInImage"
	actionProbe            = "Probe"
	actionRunHook          = "RunHook"
	actionStartContainer   = "StartContainer"
	actionKillContainer    = "KillContainer"
	actionRunStandInServer = "RunStandInServer"
)

// Options configure a Runtime.
type Options struct {
	Client   client.Client
	Recorder events.EventRecorder
	Log      logr.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Images are the images run for real; the others are stand-ins.
	Images *images.Store
	// PodsDir holds each Pod's files (volumes, resolv.conf, hosts,
	// container roots); LogDir its containers' logs, as the kubelet's
	// /var/log/pods.
	PodsDir, LogDir string
	// DNS is the kubelet's DNS settings, for the Pods' resolv.conf.
	DNS DNS
	// RestartBackoff is the first crash back-off (the kubelet's 10 s when
	// zero), doubled per restart up to 5 minutes.
	RestartBackoff time.Duration
	// Changed is called when a Pod's status should be written again.
	Changed func(client.ObjectKey)
	// ObserveDelay is how long after its start a process is reported
	// running: the kubelet's PLEG relist period (1 s) when zero, negative
	// for none.
	ObserveDelay time.Duration
}

// defaultObserveDelay is the kubelet's PLEG relist period.
const defaultObserveDelay = time.Second

// Runtime runs the containers of the Pods given to it.
type Runtime struct {
	opts Options
}

// New returns a Runtime.
func New(opts Options) *Runtime {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.RestartBackoff = cmp.Or(opts.RestartBackoff, defaultRestartBackoff)
	opts.ObserveDelay = max(cmp.Or(opts.ObserveDelay, defaultObserveDelay), 0)
	if opts.Changed == nil {
		opts.Changed = func(client.ObjectKey) {}
	}
	return &Runtime{opts: opts}
}

// Image is the image c runs for real, if the runtime knows it.
func (r *Runtime) Image(c corev1.Container) (images.Image, bool) {
	return r.opts.Images.Lookup(c.Image)
}

// Sandbox is where a Pod's containers run.
type Sandbox struct {
	// NetNS is the network namespace's file; IPs the Pod's addresses, one
	// a family, the first family first.
	NetNS string
	IPs   []netip.Addr
	// NodeName and NodeIPs are the node's, for hostNetwork Pods' hostname
	// and hosts file.
	NodeName string
	NodeIPs  []netip.Addr
}

// IP is the Pod's first address (its status.podIP), which probes reach.
func (sb Sandbox) IP() netip.Addr { return first(sb.IPs) }

// first is addrs' first address; invalid when there is none.
func first(addrs []netip.Addr) netip.Addr {
	if len(addrs) == 0 {
		return netip.Addr{}
	}
	return addrs[0]
}

// podIPs and hostIPs are a status's lists of addrs.
func podIPs(addrs []netip.Addr) []corev1.PodIP {
	var out []corev1.PodIP
	for _, a := range addrs {
		out = append(out, corev1.PodIP{IP: a.String()})
	}
	return out
}

func hostIPs(addrs []netip.Addr) []corev1.HostIP {
	var out []corev1.HostIP
	for _, a := range addrs {
		out = append(out, corev1.HostIP{IP: a.String()})
	}
	return out
}

// Pod is one Pod's containers.
type Pod struct {
	r       *Runtime
	key     client.ObjectKey
	pod     *corev1.Pod
	sandbox Sandbox
	// files is nil for a Pod that runs no real container.
	files  *podFiles
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	containers map[string]*containerState
	// initialized is set once every init container completed (or, for
	// sidecars, started); initFailed when one failed for good.
	initialized, initFailed bool
	stopping                bool
	// evicted is the eviction's message once the Pod was evicted.
	evicted string
}

// sandboxAddresses gives pod the addresses of its sandbox: the kubelet
// knows them before the containers start, and the downward API gives
// them to their environment (status.podIP(s), status.hostIP(s)).
func sandboxAddresses(pod *corev1.Pod, sb Sandbox) {
	pod.Status.PodIP = sb.IP().String()
	pod.Status.PodIPs = podIPs(sb.IPs)
	if len(sb.NodeIPs) > 0 {
		pod.Status.HostIP = sb.NodeIPs[0].String()
		pod.Status.HostIPs = hostIPs(sb.NodeIPs)
	}
}

// StartPod writes pod's files and starts its init containers, then its
// containers, in sb.
func (r *Runtime) StartPod(ctx context.Context, pod *corev1.Pod, sb Sandbox) (*Pod, error) {
	pod = pod.DeepCopy()
	sandboxAddresses(pod, sb)
	p := &Pod{r: r, key: client.ObjectKeyFromObject(pod), pod: pod, sandbox: sb, containers: map[string]*containerState{}}
	for _, c := range allContainers(pod) {
		p.containers[c.Name] = &containerState{}
	}
	if p.runsReal() {
		dir := filepath.Join(r.opts.PodsDir, string(pod.UID))
		p.files = &podFiles{c: r.opts.Client, dir: dir, pod: pod, now: r.opts.Now, tokens: map[string]time.Time{}}
		if err := r.writePodFiles(ctx, p.files, sb); err != nil {
			return nil, err
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.wg.Go(p.run)
	if p.files != nil {
		p.wg.Go(p.refreshVolumes)
	}
	return p, nil
}

// allContainers are the Pod's init containers, then its containers.
func allContainers(pod *corev1.Pod) []corev1.Container {
	return append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
}

func (p *Pod) runsReal() bool {
	for _, c := range allContainers(p.pod) {
		if _, ok := p.r.Image(c); ok {
			return true
		}
	}
	return false
}

// writePodFiles writes the volumes, resolv.conf, hosts and hostname files.
func (r *Runtime) writePodFiles(ctx context.Context, files *podFiles, sb Sandbox) error {
	if err := mkdirAll(files.dir); err != nil {
		return err
	}
	resolv, err := r.opts.DNS.resolvConf(files.pod)
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"resolv.conf": resolv,
		"hosts":       hostsFile(files.pod, sb, r.opts.DNS.domain()),
		"hostname":    []byte(podHostname(files.pod, sb) + "\n"),
	} {
		if err := writeAtomic(filepath.Join(files.dir, name), data); err != nil {
			return err
		}
	}
	return files.writeVolumes(ctx)
}

// podHostname is the hostname a Pod's containers see: spec.hostname or
// the Pod's name, or the node's on the host network.
func podHostname(pod *corev1.Pod, sb Sandbox) string {
	if pod.Spec.HostNetwork && sb.NodeName != "" {
		return sb.NodeName
	}
	return hostname(pod)
}

func hostname(pod *corev1.Pod) string {
	if pod.Spec.Hostname != "" {
		return pod.Spec.Hostname
	}
	return pod.Name
}

// refreshVolumes keeps ConfigMap, Secret and token files current.
func (p *Pod) refreshVolumes() {
	t := time.NewTicker(volumeRefresh)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		if err := p.files.writeVolumes(p.ctx); err != nil && p.ctx.Err() == nil {
			p.r.opts.Log.Error(err, "Refreshing the Pod's volumes", "pod", p.key)
		}
	}
}

// Stop ends every container within grace, as the kubelet does when the
// Pod goes: each container's preStop hook, then its stop signal, then
// SIGKILL once the grace period has passed. Then the Pod's files go.
func (p *Pod) Stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopping = true
	var running []*containerState
	var specs []corev1.Container
	var standIns time.Duration
	for _, c := range allContainers(p.pod) {
		st := p.containers[c.Name]
		switch {
		case st.proc != nil:
			running, specs = append(running, st), append(specs, c)
		case st.standIn && !st.running.IsZero():
			standIns = max(standIns, preStopSleep(c))
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for i, st := range running {
		wg.Go(func() { p.kill(specs[i], st, grace, "Stopping container") })
	}
	// A stand-in keeps serving for its preStop sleep, within the grace.
	wg.Go(func() { sleepCtx(context.Background(), min(grace, standIns)) })
	wg.Wait()
	p.cancel()
	p.wg.Wait()
	if p.files == nil {
		return nil
	}
	return os.RemoveAll(p.files.dir)
}

// GracePeriod is the Pod's terminationGracePeriodSeconds.
func GracePeriod(pod *corev1.Pod) time.Duration {
	return time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, int64(defaultGrace/time.Second))) * time.Second
}

// kill runs c's preStop hook and stops its process within grace.
func (p *Pod) kill(c corev1.Container, st *containerState, grace time.Duration, why string) {
	p.mu.Lock()
	proc := st.proc
	p.mu.Unlock()
	if proc == nil {
		return
	}
	p.event(corev1.EventTypeNormal, reasonKilling, actionKillContainer, "%s %s", why, c.Name)
	deadline := p.r.opts.Now().Add(grace)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && grace > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		if err := p.runHook(ctx, c.Lifecycle.PreStop, proc); err != nil {
			p.event(corev1.EventTypeWarning, reasonFailedPreStop, actionRunHook, "PreStopHook failed: %v", err)
		}
		cancel()
	}
	proc.Stop(max(deadline.Sub(p.r.opts.Now()), min(grace, minStopGrace)))
}

// event records an Event on the Pod.
func (p *Pod) event(eventType, reason, action, format string, args ...any) {
	if p.r.opts.Recorder != nil {
		p.r.opts.Recorder.Eventf(p.pod, nil, eventType, reason, action, format, args...)
	}
}

// changed asks for the Pod's status to be written again.
func (p *Pod) changed() { p.r.opts.Changed(p.key) }

// errNoContainer is returned for a container the Pod does not have.
var errNoContainer = errors.New("no such container")

// Running is c's running process, for exec and attach.
func (p *Pod) Running(name string) (*container.Container, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.containers[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("container %s is not valid for pod %s: %w", name, p.key.Name, errNoContainer)
	case st.standIn:
		return nil, fmt.Errorf("container %s of pod %s runs the node simulator's stand-in for image %q, not a real program", name, p.key.Name, st.image)
	case st.proc == nil:
		return nil, fmt.Errorf("container %s of pod %s is not running: %w", name, p.key.Name, container.ErrNotRunning)
	}
	return st.proc, nil
}

// IsNotFound tells whether err is about a container the Pod lacks.
func IsNotFound(err error) bool { return errors.Is(err, errNoContainer) }

// preStopSleep is how long a stand-in container keeps serving after it
// is asked to stop: its preStop sleep (the sleep action or an exec of
// `sleep N`, also inside `sh -c`).
func preStopSleep(c corev1.Container) time.Duration {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	switch {
	case h.Sleep != nil:
		return time.Duration(h.Sleep.Seconds) * time.Second
	case h.Exec != nil:
		words := strings.Fields(strings.Join(h.Exec.Command, " "))
		for i, w := range words {
			if (w == "sleep" || strings.HasSuffix(w, "/sleep")) && i+1 < len(words) {
				if d, err := time.ParseDuration(strings.Trim(words[i+1], `"';`) + "s"); err == nil {
					return d
				}
			}
		}
	}
	return 0
}
