// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
)

// standIn stands for a container whose image the simulator does not run
// for real: it runs until the Pod stops (an init container completes at
// once), Ready after its readiness probe's initial delay, while the
// simulator serves its ports; its log and an Event say so.
func (p *Pod) standIn(c corev1.Container, st *containerState) {
	msg := fmt.Sprintf("image %q is not one the node simulator runs for real: container %s is a stand-in that answers HTTP (and UDP) on its containerPorts with the Pod's name", c.Image, c.Name)
	p.event(corev1.EventTypeWarning, reasonStandIn, actionRunStandInServer, "%s", msg)
	logPath := container.LogPath(p.r.opts.LogDir, p.key.Namespace, p.key.Name, string(p.pod.UID), c.Name, 0)
	if l, err := container.OpenLog(logPath, container.DefaultLogMaxSize, container.DefaultLogMaxFiles, p.r.opts.Now); err == nil {
		w := l.Stream(container.Stdout)
		_, _ = fmt.Fprintf(w, "svcnet node simulator: %s\n", msg)
		_ = w.Close()
		_ = l.Close()
	}
	now := p.r.opts.Now()
	if isInit(p.pod, c.Name) && ptr.Deref(c.RestartPolicy, "") != corev1.ContainerRestartPolicyAlways {
		p.update(st, func() {
			st.log, st.started = logPath, true
			st.terminated = &corev1.ContainerStateTerminated{Reason: ReasonCompleted, StartedAt: metav1.NewTime(now), FinishedAt: metav1.NewTime(now)}
		})
		return
	}
	p.update(st, func() { st.log, st.running, st.started = logPath, now, true })
	p.changed()
	delay := time.Duration(0)
	if c.ReadinessProbe != nil {
		delay = time.Duration(c.ReadinessProbe.InitialDelaySeconds) * time.Second
	}
	if !sleepCtx(p.ctx, delay) {
		return
	}
	if p.update(st, func() { st.ready = true }) {
		p.changed()
	}
	<-p.ctx.Done()
}

func isInit(pod *corev1.Pod, name string) bool {
	return slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == name })
}

// StatusInput is what a Pod's status needs besides its containers.
type StatusInput struct {
	// Old is the status the API server has, for transition times.
	Old corev1.PodStatus
	// HostIPs and PodIPs are the node's and the Pod's addresses, one a
	// family, the first family first.
	HostIPs, PodIPs []netip.Addr
	Started, Now    time.Time
}

// Status is what a kubelet would report for the Pod now: its phase,
// conditions, addresses and every container's state.
func (p *Pod) Status(in StatusInput) corev1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	var initStatuses, statuses []corev1.ContainerStatus
	for _, c := range p.pod.Spec.InitContainers {
		initStatuses = append(initStatuses, p.containerStatus(c, true, in.Now))
	}
	ready := true
	for _, c := range p.pod.Spec.Containers {
		cs := p.containerStatus(c, false, in.Now)
		ready = ready && cs.Ready
		statuses = append(statuses, cs)
	}
	for _, cs := range initStatuses {
		if isSidecar(p.pod, cs.Name) {
			ready = ready && cs.Ready
		}
	}
	phase := p.phase(statuses)
	if p.evicted != "" {
		phase = corev1.PodFailed
	}
	ready = ready && phase == corev1.PodRunning
	cond := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.NewTime(in.Now)}
		for _, old := range in.Old.Conditions {
			if old.Type == t && old.Status == s {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	started := metav1.NewTime(in.Started)
	podReady, notReady := ready, "ContainersNotReady"
	if ready && !readinessGatesTrue(p.pod.Spec.ReadinessGates, in.Old.Conditions) {
		podReady, notReady = false, reasonReadinessGatesNotReady
	}
	conditions := []corev1.PodCondition{
		cond(corev1.PodReadyToStartContainers, true, ""),
		cond(corev1.PodInitialized, p.initialized, "ContainersNotInitialized"),
		cond(corev1.ContainersReady, ready, "ContainersNotReady"),
		cond(corev1.PodReady, podReady, notReady),
		cond(corev1.PodScheduled, true, ""),
	}
	// Conditions others own (a readiness gate's, the disruption
	// controller's) stay as they are, as the kubelet keeps them.
	for _, c := range in.Old.Conditions {
		if !slices.Contains(kubeletConditions, c.Type) {
			conditions = append(conditions, c)
		}
	}
	reason, message := "", ""
	if p.evicted != "" {
		reason, message = reasonEvicted, p.evicted
	}
	return corev1.PodStatus{
		Phase:                 phase,
		Reason:                reason,
		Message:               message,
		Conditions:            conditions,
		HostIP:                first(in.HostIPs).String(),
		HostIPs:               hostIPs(in.HostIPs),
		PodIP:                 first(in.PodIPs).String(),
		PodIPs:                podIPs(in.PodIPs),
		StartTime:             &started,
		QOSClass:              in.Old.QOSClass,
		InitContainerStatuses: initStatuses,
		ContainerStatuses:     statuses,
	}
}

// kubeletConditions are the Pod conditions the kubelet owns.
var kubeletConditions = []corev1.PodConditionType{
	corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled,
}

// reasonReadinessGatesNotReady is the kubelet's reason for a Pod whose
// containers are ready but whose readiness gates are not all True.
const reasonReadinessGatesNotReady = "ReadinessGatesNotReady"

// readinessGatesTrue tells whether every readiness gate's condition is
// in conditions and True: a Pod with gates is Ready only then, as the
// kubelet decides (the Blue Green test of upstream's network suite flips
// a gate to move traffic between two Pods).
func readinessGatesTrue(gates []corev1.PodReadinessGate, conditions []corev1.PodCondition) bool {
	for _, g := range gates {
		i := slices.IndexFunc(conditions, func(c corev1.PodCondition) bool { return c.Type == g.ConditionType })
		if i < 0 || conditions[i].Status != corev1.ConditionTrue {
			return false
		}
	}
	return true
}

func isSidecar(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return ptr.Deref(c.RestartPolicy, "") == corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}

// phase is the kubelet's Pod phase from its containers' states; p.mu is
// held.
func (p *Pod) phase(statuses []corev1.ContainerStatus) corev1.PodPhase {
	switch {
	case p.initFailed:
		return corev1.PodFailed
	case !p.initialized:
		return corev1.PodPending
	}
	var running, waiting, stopped, succeeded int
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++ // restarting after a back-off
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case p.pod.Spec.RestartPolicy == corev1.RestartPolicyAlways:
		return corev1.PodRunning
	case stopped == succeeded:
		return corev1.PodSucceeded
	case p.pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
		return corev1.PodFailed
	}
	return corev1.PodRunning // OnFailure: restarting the failed ones
}

// containerStatus is one container's status; p.mu is held. A process
// that started less than the observation delay ago is not seen yet, as
// the kubelet sees a start only at its next relist of the runtime: a
// command that ends at once (kubectl run -i) is reported ended, never
// running.
func (p *Pod) containerStatus(c corev1.Container, init bool, now time.Time) corev1.ContainerStatus {
	st := p.containers[c.Name]
	running := !st.running.IsZero() && (st.standIn || now.Sub(st.running) >= p.r.opts.ObserveDelay)
	cs := corev1.ContainerStatus{
		Name: c.Name, Image: c.Image, ImageID: c.Image, RestartCount: st.restarts, Ready: st.ready && running,
		Started: ptr.To(st.started && running),
	}
	if running || st.terminated != nil || st.last != nil {
		cs.ContainerID = fmt.Sprintf("svcnet://%s-%s-%d", strings.ReplaceAll(string(p.pod.UID), "-", "")[:12], c.Name, st.restarts)
	}
	switch {
	case running:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(st.running)}
	case st.terminated != nil:
		cs.State.Terminated = st.terminated
	case st.waiting != "":
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: st.waiting, Message: st.message}
	case init || p.initialized:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonCreating}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonPodInitializing}
	}
	if st.last != nil {
		cs.LastTerminationState.Terminated = st.last
	}
	return cs
}

// StatusEqual compares what a status write decides: phase, addresses,
// conditions, and each container's state, readiness and restarts.
func StatusEqual(a, b corev1.PodStatus) bool {
	if a.Phase != b.Phase || !slices.Equal(a.PodIPs, b.PodIPs) || !slices.Equal(a.HostIPs, b.HostIPs) ||
		len(a.ContainerStatuses) != len(b.ContainerStatuses) || len(a.InitContainerStatuses) != len(b.InitContainerStatuses) {
		return false
	}
	cond := func(s corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
		i := slices.IndexFunc(s.Conditions, func(c corev1.PodCondition) bool { return c.Type == t })
		if i < 0 {
			return ""
		}
		return s.Conditions[i].Status
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled, corev1.PodInitialized, corev1.PodReadyToStartContainers} {
		if cond(a, t) != cond(b, t) {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		if containerSummary(a.ContainerStatuses[i]) != containerSummary(b.ContainerStatuses[i]) {
			return false
		}
	}
	for i := range a.InitContainerStatuses {
		if containerSummary(a.InitContainerStatuses[i]) != containerSummary(b.InitContainerStatuses[i]) {
			return false
		}
	}
	return true
}

// containerSummary is what of a container status a write keeps up to
// date.
func containerSummary(cs corev1.ContainerStatus) string {
	state := "running"
	switch {
	case cs.State.Waiting != nil:
		state = "waiting:" + cs.State.Waiting.Reason
	case cs.State.Terminated != nil:
		state = fmt.Sprintf("terminated:%d", cs.State.Terminated.ExitCode)
	case cs.State.Running != nil:
		state = "running:" + cs.State.Running.StartedAt.UTC().String()
	}
	return fmt.Sprintf("%s/%t/%t/%d/%s", cs.Name, cs.Ready, ptr.Deref(cs.Started, false), cs.RestartCount, state)
}

// LogFile is the log of the Pod's container name: of its current (or
// last) run, or with previous of the one before; running tells whether
// the run is still going, for a follow.
func (p *Pod) LogFile(name string, previous bool) (path string, running bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.containers[name]
	switch {
	case !ok:
		return "", false, fmt.Errorf("container %s is not valid for pod %s: %w", name, p.key.Name, errNoContainer)
	case previous && st.previousLog == "":
		return "", false, fmt.Errorf("previous terminated container %q in pod %q not found", name, p.key.Name)
	case previous:
		return st.previousLog, false, nil
	case st.log == "":
		reason := ReasonCreating
		if st.waiting != "" {
			reason = st.waiting
		}
		return "", false, fmt.Errorf("container %q in pod %q is waiting to start: %s", name, p.key.Name, reason)
	}
	return st.log, !st.running.IsZero(), nil
}

// ContainerRunning tells whether the Pod's container name runs now.
func (p *Pod) ContainerRunning(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.containers[name]
	return ok && !st.running.IsZero()
}
