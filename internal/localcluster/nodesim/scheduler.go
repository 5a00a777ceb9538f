package nodesim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The simulator is also the scheduler of its nodes: an unscheduled Pod
// goes to the node with the fewest Pods among those its nodeSelector
// accepts, and starts while its binding is written.

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
// those its nodeSelector accepts, as the scheduler's spreading would, and
// returns the node; none when pod is not bound here. The Pod's namespace
// is made while the binding is written, and removed if the binding fails.
func (r *podReconciler) bind(ctx context.Context, pod *corev1.Pod) (string, error) {
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		return "", nil // another scheduler's Pod
	}
	key := client.ObjectKeyFromObject(pod)
	// Cordoned nodes (kubectl cordon) take no new Pods.
	cordoned := map[string]bool{}
	for _, name := range r.order {
		var node corev1.Node
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &node); err == nil && node.Spec.Unschedulable {
			cordoned[name] = true
		}
	}
	r.mu.Lock()
	best := ""
	for _, name := range r.order {
		n := r.nodes[name]
		if cordoned[name] || !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(nodeObject(n.Node).Labels)) {
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
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "No schedulable simulated node matches the Pod's nodeSelector %v", pod.Spec.NodeSelector)
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
