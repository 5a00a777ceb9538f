// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// placedPod is a Pod that runs, or is bound to run, on a node, as the
// scheduler's inter-Pod affinity filter sees it.
type placedPod struct {
	pod  *corev1.Pod
	node string
}

// interPodAffinityReason is why pod may not run on node by the required
// inter-Pod affinity and anti-affinity terms, as kube-scheduler's
// InterPodAffinity filter decides; "" when it may. placed are the other
// Pods with their nodes, nodes the Node objects by name (for the
// topology keys), nsLabels the labels of a namespace (for the terms'
// namespaceSelector).
//
// Tests that need two Pods on different nodes (the pause Pods of
// `Services should preserve source pod IP for traffic thru service
// cluster IP`) say so with a required anti-affinity on the hostname;
// without this filter both could land on the node with the fewest Pods.
func interPodAffinityReason(pod *corev1.Pod, node *corev1.Node, placed []placedPod, nodes map[string]*corev1.Node, nsLabels func(ns string) map[string]string) string {
	sameDomain := func(other string, key string) bool {
		v, ok := node.Labels[key]
		o := nodes[other]
		return ok && o != nil && o.Labels[key] == v
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			for _, p := range placed {
				if sameDomain(p.node, term.TopologyKey) && termMatches(term, pod, p.pod, nsLabels) {
					return "a Pod it must not share " + term.TopologyKey + " with runs there (" + p.pod.Namespace + "/" + p.pod.Name + ")"
				}
			}
		}
	}
	for _, p := range placed {
		a := p.pod.Spec.Affinity
		if a == nil || a.PodAntiAffinity == nil {
			continue
		}
		for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if sameDomain(p.node, term.TopologyKey) && termMatches(term, p.pod, pod, nsLabels) {
				return "Pod " + p.pod.Namespace + "/" + p.pod.Name + " there must not share " + term.TopologyKey + " with it"
			}
		}
	}
	if a := pod.Spec.Affinity; a != nil && a.PodAffinity != nil {
		for _, term := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if !affinitySatisfied(term, pod, placed, sameDomain, nsLabels) {
				return "no Pod it must share " + term.TopologyKey + " with runs there"
			}
		}
	}
	return ""
}

// affinitySatisfied tells whether a Pod matching term runs in node's
// domain; with none anywhere, a Pod matching its own term may start the
// group, as kube-scheduler allows.
func affinitySatisfied(term corev1.PodAffinityTerm, pod *corev1.Pod, placed []placedPod, sameDomain func(node, key string) bool, nsLabels func(string) map[string]string) bool {
	anywhere := false
	for _, p := range placed {
		if !termMatches(term, pod, p.pod, nsLabels) {
			continue
		}
		if sameDomain(p.node, term.TopologyKey) {
			return true
		}
		anywhere = true
	}
	return !anywhere && termMatches(term, pod, pod, nsLabels)
}

// selectsNamespaces tells whether a required inter-Pod affinity or
// anti-affinity term of pod picks namespaces by their labels.
func selectsNamespaces(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if a.PodAffinity != nil {
		terms = append(terms, a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	if a.PodAntiAffinity != nil {
		terms = append(terms, a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution...)
	}
	return slices.ContainsFunc(terms, func(t corev1.PodAffinityTerm) bool { return t.NamespaceSelector != nil })
}

// termMatches tells whether other is one of the Pods term of owner's
// affinity names: in its namespaces (owner's own when it names none) and
// matching its label selector.
func termMatches(term corev1.PodAffinityTerm, owner, other *corev1.Pod, nsLabels func(string) map[string]string) bool {
	inNamespace := false
	switch {
	case len(term.Namespaces) == 0 && term.NamespaceSelector == nil:
		inNamespace = other.Namespace == owner.Namespace
	case slices.Contains(term.Namespaces, other.Namespace):
		inNamespace = true
	case term.NamespaceSelector != nil:
		sel, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
		inNamespace = err == nil && sel.Matches(labels.Set(nsLabels(other.Namespace)))
	}
	if !inNamespace || term.LabelSelector == nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	return err == nil && sel.Matches(labels.Set(other.Labels))
}
