package nodesim

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The simulator is also the scheduler of its nodes: an unscheduled Pod
// goes to the node with the fewest Pods among those kube-scheduler's
// filters would accept (cordon, nodeSelector and required node affinity,
// taints), and starts while its binding is written.

// remember records pod's node for spreading; r.mu is held.
func (r *podReconciler) remember(key types.NamespacedName, node string) {
	if old, ok := r.bound[key]; ok {
		if old == node {
			return
		}
		if s := r.nodes[old]; s != nil {
			s.count--
		}
	}
	r.bound[key] = node
	if s := r.nodes[node]; s != nil {
		s.count++
	}
}

// forget drops a Pod from the spreading counts; r.mu is held.
func (r *podReconciler) forget(key types.NamespacedName) {
	if old, ok := r.bound[key]; ok {
		if s := r.nodes[old]; s != nil {
			s.count--
		}
		delete(r.bound, key)
	}
}

// bind schedules pod on the simulated node with the fewest Pods among
// those it may run on, as the scheduler's spreading would, and
// returns the node; none when pod is not bound here. The Pod's namespace
// is made while the binding is written, and removed if the binding fails.
func (r *podReconciler) bind(ctx context.Context, pod *corev1.Pod) (string, error) {
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		return "", nil // another scheduler's Pod
	}
	key := client.ObjectKeyFromObject(pod)
	nodes := make(map[string]*corev1.Node, len(r.order))
	for _, name := range r.order {
		var node corev1.Node
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &node); err == nil {
			nodes[name] = &node
		}
	}
	r.mu.Lock()
	best := ""
	var refused []string
	for _, name := range r.order {
		n := r.nodes[name]
		node := nodes[name]
		if node == nil {
			node = nodeObject(n.Node)
		}
		if why := unschedulableReason(pod, node); why != "" {
			refused = append(refused, name+": "+why)
			continue
		}
		if best == "" || n.count < r.nodes[best].count {
			best = name
		}
	}
	if best != "" {
		r.remember(key, best)
	}
	r.mu.Unlock()
	if best == "" {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "0/%d simulated nodes are available: %s", len(r.order), strings.Join(refused, "; "))
		return "", nil
	}
	started := make(chan struct{})
	bound := pod.DeepCopy() // the client writes to pod meanwhile
	bound.Spec.NodeName = best
	go func() {
		defer close(started)
		if bound.DeletionTimestamp == nil {
			// A failure is retried, and reported, by the start after binding.
			_, _ = r.start(ctx, bound, r.nodes[best])
		}
	}()
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: best},
	}
	err := r.c.SubResource("binding").Create(ctx, pod, binding)
	<-started
	if err != nil {
		stopErr := r.remove(key)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return "", stopErr // bound meanwhile, or gone: the next event tells
		}
		return "", errors.Join(fmt.Errorf("binding Pod %s to %s: %w", key, best, err), stopErr)
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding", "Successfully assigned %s to %s", key, best)
	return best, nil
}

// unschedulableReason is why pod may not run on node, as kube-scheduler's
// NodeUnschedulable, NodeAffinity and TaintToleration filters decide; ""
// when it may. A DaemonSet's Pods name their node in a required node
// affinity term and tolerate a cordon, as kube-controller-manager writes
// them.
func unschedulableReason(pod *corev1.Pod, node *corev1.Node) string {
	logger := klog.Background()
	if node.Spec.Unschedulable {
		cordon := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
		if !corev1helpers.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, &cordon, false) {
			return "cordoned"
		}
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil {
		return "the Pod's node affinity is invalid: " + err.Error()
	} else if !ok {
		return "does not match the Pod's nodeSelector or required node affinity"
	}
	ready := nodeReady(node)
	scheduling := func(t *corev1.Taint) bool {
		if ready && t.Effect == corev1.TaintEffectNoSchedule && (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) {
			// kube-apiserver taints every new Node not-ready, and
			// kube-controller-manager's node lifecycle controller lifts
			// it within seconds of the node reporting Ready, or never
			// where it does not run (envtest): the simulator schedules on
			// its Ready nodes as it would a moment later.
			return false
		}
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	if taint, found := corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, scheduling, false); found {
		return "untolerated taint " + taint.ToString()
	}
	return ""
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
