// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/kuberuntime"
)

// The kubelets' pod workers: each bound Pod gets its network and its
// containers once per UID, its status is written as its containers
// change, and a deleted Pod is stopped within its grace period and then
// removed, as the kubelet finishes a deletion.

type nodeState struct {
	Node
	used      map[netip.Addr]bool
	count     int // Pods bound here and not yet gone
	hostPorts nodeHostPorts
}

// runningPod is a Pod the simulator started.
type runningPod struct {
	uid  types.UID
	node string
	net  *netlab.Pod
	// ips are the Pod's addresses, one a family (its node's on the host
	// network).
	ips     []netip.Addr
	started time.Time
	rt      *kuberuntime.Pod
	// terminating is set when the deletion was first seen; finishing
	// when its containers begin to stop for good (deleted, or done), and
	// finished once they stopped and its network went. A terminating Pod
	// is reported until finished, and removed from the API only then.
	terminating, finishing, finished bool
	hostPorts                        []hostPort
}

type podReconciler struct {
	c        client.Client
	recorder events.EventRecorder
	log      logr.Logger
	now      func() time.Time
	images   *images.Store
	runtime  *kuberuntime.Runtime

	mu    sync.Mutex
	nodes map[string]*nodeState
	order []string
	pods  map[types.NamespacedName]*runningPod
	// bound remembers which node each known Pod is on, for spreading.
	bound map[types.NamespacedName]string

	changes chan event.GenericEvent
	// stopping is closed when the simulator stops.
	stopping chan struct{}
}

// newPodReconciler is the kubelets' and scheduler's state for opts.Nodes.
func newPodReconciler(c client.Client, recorder events.EventRecorder, log logr.Logger, now func() time.Time, opts Options) *podReconciler {
	r := &podReconciler{
		c: c, recorder: recorder, log: log, now: now, images: opts.Images,
		nodes: map[string]*nodeState{}, pods: map[types.NamespacedName]*runningPod{}, bound: map[types.NamespacedName]string{},
		changes: make(chan event.GenericEvent, 64), stopping: make(chan struct{}),
	}
	r.runtime = kuberuntime.New(kuberuntime.Options{
		Client: c, Recorder: recorder, Log: log, Now: now, Images: opts.Images,
		PodsDir: opts.PodsDir, LogDir: opts.LogDir, DNS: opts.DNS, RestartBackoff: opts.RestartBackoff, Changed: r.changed,
	})
	for _, n := range opts.Nodes {
		r.nodes[n.Name] = &nodeState{Node: n, used: map[netip.Addr]bool{}}
		r.order = append(r.order, n.Name)
	}
	return r
}

// changed asks for a Pod's status to be written again: one of its
// containers started, exited or changed readiness.
func (r *podReconciler) changed(key client.ObjectKey) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	select {
	case r.changes <- event.GenericEvent{Object: pod}:
	case <-r.stopping: // the controller no longer reads
	}
}

// stopAll stops every Pod's containers, as a node going down would.
func (r *podReconciler) stopAll() {
	close(r.stopping)
	r.mu.Lock()
	var rts []*kuberuntime.Pod
	for _, run := range r.pods {
		if !run.finishing {
			rts = append(rts, run.rt)
		}
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, rt := range rts {
		wg.Go(func() { _ = rt.Stop(time.Second) })
	}
	wg.Wait()
}

func (r *podReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.c.Get(ctx, req.NamespacedName, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.remove(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if pod.Spec.NodeName == "" {
		// The simulator is the scheduler and every kubelet at once: the
		// Pod starts with its binding, without waiting for the binding to
		// come back through the watch.
		node, err := r.bind(ctx, &pod)
		if node == "" || err != nil {
			return ctrl.Result{}, err
		}
		pod.Spec.NodeName = node
	}
	r.mu.Lock()
	node := r.nodes[pod.Spec.NodeName]
	r.remember(req.NamespacedName, pod.Spec.NodeName)
	run := r.pods[req.NamespacedName]
	finished := run != nil && run.finished
	r.mu.Unlock()
	if node == nil {
		return ctrl.Result{}, nil // not a simulated node
	}
	if run != nil && run.uid == pod.UID && finished && pod.DeletionTimestamp == nil {
		return ctrl.Result{}, nil // done: its final status was written
	}
	if pod.DeletionTimestamp != nil {
		if run != nil && run.uid == pod.UID && !finished {
			// The kubelet keeps reporting a terminating Pod: a readiness
			// probe that fails during the grace period makes it unready
			// while it still serves.
			if err := r.patchStatus(ctx, &pod, node, run); err != nil {
				return ctrl.Result{}, err
			}
		}
		return r.terminate(ctx, &pod)
	}
	if (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) && (run == nil || run.uid != pod.UID) {
		return ctrl.Result{}, nil // finished before this simulator started
	}
	run, err := r.start(ctx, &pod, node)
	if err != nil {
		r.recorder.Eventf(&pod, nil, corev1.EventTypeWarning, "FailedCreatePodSandBox", "CreateSandbox", "Failed to create pod sandbox: %v", err)
		return ctrl.Result{}, err
	}
	return r.writeStatus(ctx, &pod, node, run)
}

// start gives pod its network and its containers, once per Pod UID.
func (r *podReconciler) start(ctx context.Context, pod *corev1.Pod, node *nodeState) (*runningPod, error) {
	key := client.ObjectKeyFromObject(pod)
	r.mu.Lock()
	run := r.pods[key]
	r.mu.Unlock()
	if run != nil && run.uid == pod.UID {
		return run, nil
	}
	if run != nil {
		// Same name, new Pod (a StatefulSet replacement): start over.
		if err := r.remove(key); err != nil {
			return nil, err
		}
	}
	run = &runningPod{uid: pod.UID, node: node.Name, started: r.now(), ips: node.Net.IPs}
	netnsPath := netlab.Path(node.Net.NetNS)
	if !pod.Spec.HostNetwork {
		np, err := r.startNetwork(pod, node)
		if err != nil {
			return nil, err
		}
		run.net, netnsPath, run.ips = np, netlab.Path(np.NetNS), np.IPs
	}
	hps, err := r.mapHostPorts(pod, node, run.ips)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("mapping the Pod's hostPorts: %w", err), r.removeNetwork(run))
	}
	run.hostPorts = hps
	sb := kuberuntime.Sandbox{NetNS: netnsPath, IPs: run.ips, NodeName: node.Name, NodeIPs: node.Net.IPs}
	rt, err := r.runtime.StartPod(ctx, pod, sb)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("starting the Pod's containers: %w", err), r.unmapHostPorts(node, run), r.removeNetwork(run))
	}
	run.rt = rt
	r.mu.Lock()
	r.pods[key] = run
	r.mu.Unlock()
	r.log.V(1).Info("Started Pod", "pod", key, "node", node.Name, "ips", run.ips)
	return run, nil
}

// finish stops a Pod's containers within grace, then removes its network;
// it is done once per Pod.
func (r *podReconciler) finish(run *runningPod, grace time.Duration) error {
	r.mu.Lock()
	if run.finishing {
		r.mu.Unlock()
		return nil
	}
	run.finishing = true
	node := r.nodes[run.node]
	r.mu.Unlock()
	errs := []error{run.rt.Stop(grace)}
	if node != nil {
		errs = append(errs, r.unmapHostPorts(node, run))
	}
	errs = append(errs, r.removeNetwork(run))
	r.mu.Lock()
	run.finished = true
	r.mu.Unlock()
	r.log.V(1).Info("Stopped Pod", "node", run.node, "ips", run.ips)
	return errors.Join(errs...)
}

// remove forgets a Pod that is gone, stopping it first if it still runs.
func (r *podReconciler) remove(key types.NamespacedName) error {
	r.mu.Lock()
	run := r.pods[key]
	delete(r.pods, key)
	r.forget(key)
	r.mu.Unlock()
	if run == nil {
		return nil
	}
	return r.finish(run, 0)
}

// terminate stops a deleted Pod's containers within its deletion grace
// period (preStop hooks, stop signal, then SIGKILL), in the background,
// then finishes the deletion, as the kubelet does.
func (r *podReconciler) terminate(ctx context.Context, pod *corev1.Pod) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(pod)
	grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
	r.mu.Lock()
	run := r.pods[key]
	if run != nil && run.uid != pod.UID {
		run = nil
	}
	begin := run != nil && !run.terminating
	if begin {
		run.terminating = true
	}
	finished := run == nil || run.finished
	r.mu.Unlock()
	if begin && !finished {
		go func() {
			if err := r.finish(run, grace); err != nil {
				r.log.Error(err, "Stopping a deleted Pod", "pod", key)
			}
			r.changed(key)
		}()
		return ctrl.Result{}, nil
	}
	if !finished {
		return ctrl.Result{}, nil // the stop in progress asks again when done
	}
	err := r.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// writeStatus reports the Pod's containers as they are; a Pod whose
// containers all ended for good is then finished (its network goes).
func (r *podReconciler) writeStatus(ctx context.Context, pod *corev1.Pod, node *nodeState, run *runningPod) (ctrl.Result, error) {
	if err := r.patchStatus(ctx, pod, node, run); err != nil {
		return ctrl.Result{}, err
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ctrl.Result{}, r.finish(run, 0)
	}
	return ctrl.Result{}, nil
}

// patchStatus writes the status of the Pod's containers as they are, when
// it differs from pod's; pod then holds it. A Pod gone meanwhile is no
// error.
func (r *podReconciler) patchStatus(ctx context.Context, pod *corev1.Pod, node *nodeState, run *runningPod) error {
	want := run.rt.Status(kuberuntime.StatusInput{Old: pod.Status, HostIPs: node.Net.IPs, PodIPs: run.ips, Started: run.started, Now: r.now()})
	if kuberuntime.StatusEqual(pod.Status, want) {
		return nil
	}
	orig := pod.DeepCopy()
	pod.Status = want
	if err := r.c.Status().Patch(ctx, pod, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("writing the status of Pod %s: %w", client.ObjectKeyFromObject(pod), err)
	}
	return nil
}
