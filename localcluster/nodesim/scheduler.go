// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// taints, required inter-Pod affinity and anti-affinity), and starts
// while its binding is written.

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

// placed are the Pods other than pod that run, or are bound to run, on
// a simulated node: their nodeName, or the binding this scheduler made
// and the cache may not show yet; r.mu is held.
func (r *podReconciler) placed(pod *corev1.Pod, pods []corev1.Pod) []placedPod {
	var out []placedPod
	for i := range pods {
		p := &pods[i]
		if p.UID == pod.UID || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		node := p.Spec.NodeName
		if node == "" {
			node = r.bound[client.ObjectKeyFromObject(p)]
		}
		if node != "" {
			out = append(out, placedPod{pod: p, node: node})
		}
	}
	return out
}

// namespaceLabels returns the labels of a namespace, for the
// namespaceSelector of an inter-Pod affinity term; the namespaces are
// read only when pod or one of pods has such a term, and before r.mu is
// taken.
func (r *podReconciler) namespaceLabels(ctx context.Context, pod *corev1.Pod, pods []corev1.Pod) (func(string) map[string]string, error) {
	labelsOf := map[string]map[string]string{}
	lookup := func(ns string) map[string]string { return labelsOf[ns] }
	if !selectsNamespaces(pod) && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return selectsNamespaces(&p) }) {
		return lookup, nil
	}
	var list corev1.NamespaceList
	if err := r.c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing namespaces for an inter-Pod affinity's namespaceSelector: %w", err)
	}
	for _, n := range list.Items {
		labelsOf[n.Name] = n.Labels
	}
	return lookup, nil
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
	nodes := r.schedulingNodes(ctx)
	var others corev1.PodList
	if err := r.c.List(ctx, &others); err != nil {
		return "", fmt.Errorf("listing Pods to schedule %s: %w", key, err)
	}
	nsLabels, err := r.namespaceLabels(ctx, pod, others.Items)
	if err != nil {
		return "", fmt.Errorf("scheduling %s: %w", key, err)
	}
	best, refused := r.choose(pod, nodes, others.Items, nsLabels)
	if best == "" {
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Scheduling", "0/%d simulated nodes are available: %s", len(r.order), strings.Join(refused, "; "))
		return "", nil
	}
	bound := pod.DeepCopy() // the client may write to pod
	bound.Spec.NodeName = best
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: best},
	}
	// Bound before it starts, as a kubelet only runs bound Pods: the
	// ServiceAccount tokens the start asks for carry the node only when
	// the API server has the binding (the agents' node reports depend on
	// it). The start does not wait for the binding to come back through
	// the watch.
	if err := r.c.SubResource("binding").Create(ctx, pod, binding); err != nil {
		// What choose set aside for the Pod goes back.
		stopErr := r.remove(key)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return "", stopErr // bound meanwhile, or gone: the next event tells
		}
		return "", errors.Join(fmt.Errorf("binding Pod %s to %s: %w", key, best, err), stopErr)
	}
	if bound.DeletionTimestamp == nil {
		// A failure is retried, and reported, by the start after binding.
		_, _ = r.start(ctx, bound, r.nodes[best])
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Scheduled", "Binding", "Successfully assigned %s to %s", key, best)
	return best, nil
}

// schedulingNodes are the simulated nodes' Node objects, from the cache,
// or built from the simulator's own while the cache has not seen one yet.
func (r *podReconciler) schedulingNodes(ctx context.Context) map[string]*corev1.Node {
	nodes := make(map[string]*corev1.Node, len(r.order))
	for _, name := range r.order {
		var node corev1.Node
		if err := r.c.Get(ctx, client.ObjectKey{Name: name}, &node); err == nil {
			nodes[name] = &node
		} else {
			nodes[name] = nodeObject(r.nodes[name].Node) // not in the cache yet
		}
	}
	return nodes
}

// choose picks, and remembers for pod, the node with the fewest Pods
// among those pod may run on; refused says why each other node was not.
func (r *podReconciler) choose(pod *corev1.Pod, nodes map[string]*corev1.Node, others []corev1.Pod, nsLabels func(string) map[string]string) (best string, refused []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	placed := r.placed(pod, others)
	for _, name := range r.order {
		node := nodes[name]
		why := unschedulableReason(pod, node)
		if why == "" {
			why = interPodAffinityReason(pod, node, placed, nodes, nsLabels)
		}
		if why != "" {
			refused = append(refused, name+": "+why)
			continue
		}
		if best == "" || r.nodes[name].count < r.nodes[best].count {
			best = name
		}
	}
	if best != "" {
		r.remember(client.ObjectKeyFromObject(pod), best)
	}
	return best, refused
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
