// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pinnedTo is the node affinity kube-controller-manager's DaemonSet
// controller gives each of its Pods.
func pinnedTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
		}}},
	}}
}

func TestUnschedulableReason(t *testing.T) {
	node := func(name string, edit func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "zone-1"}}}
		if edit != nil {
			edit(n)
		}
		return n
	}
	cordoned := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	tainted := func(effect corev1.TaintEffect) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: effect}} }
	}
	notReadyTaint := func(ready corev1.ConditionStatus) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
	}
	tolerateCordon := []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	tolerateDB := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db"}}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		node *corev1.Node
		ok   bool
	}{
		{"no constraint", corev1.PodSpec{}, node("node-1", nil), true},
		{"nodeSelector matches", corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelTopologyZone: "zone-1"}}, node("node-1", nil), true},
		{"nodeSelector does not match", corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelTopologyZone: "zone-2"}}, node("node-1", nil), false},
		{"DaemonSet affinity names the node", corev1.PodSpec{Affinity: pinnedTo("node-1")}, node("node-1", nil), true},
		{"DaemonSet affinity names another node", corev1.PodSpec{Affinity: pinnedTo("node-2")}, node("node-1", nil), false},
		{"cordoned", corev1.PodSpec{}, node("node-1", cordoned), false},
		{"cordoned, tolerated as by a DaemonSet's Pod", corev1.PodSpec{Tolerations: tolerateCordon}, node("node-1", cordoned), true},
		{"NoSchedule taint", corev1.PodSpec{}, node("node-1", tainted(corev1.TaintEffectNoSchedule)), false},
		{"NoExecute taint", corev1.PodSpec{}, node("node-1", tainted(corev1.TaintEffectNoExecute)), false},
		{"PreferNoSchedule taint", corev1.PodSpec{}, node("node-1", tainted(corev1.TaintEffectPreferNoSchedule)), true},
		{"NoSchedule taint tolerated", corev1.PodSpec{Tolerations: tolerateDB}, node("node-1", tainted(corev1.TaintEffectNoSchedule)), true},
		{"a new Node's not-ready taint, node Ready", corev1.PodSpec{}, node("node-1", notReadyTaint(corev1.ConditionTrue)), true},
		{"not-ready taint, node not Ready", corev1.PodSpec{}, node("node-1", notReadyTaint(corev1.ConditionFalse)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := unschedulableReason(&corev1.Pod{Spec: tc.spec}, tc.node)
			if (why == "") != tc.ok {
				t.Fatalf("unschedulableReason = %q, want schedulable %v", why, tc.ok)
			}
		})
	}
}

// TestInterPodAffinityReason checks the required inter-Pod affinity and
// anti-affinity filter: a Pod's own anti-affinity, an existing Pod's
// anti-affinity against the new one, affinity, namespaces, and topology
// keys other than the hostname.
func TestInterPodAffinityReason(t *testing.T) {
	nodes := map[string]*corev1.Node{}
	for i, zone := range []string{"zone-a", "zone-a", "zone-b"} {
		name := []string{"node-1", "node-2", "node-3"}[i]
		nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, corev1.LabelTopologyZone: zone,
		}}}
	}
	term := func(key string, namespaces ...string) corev1.PodAffinityTerm {
		return corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pause"}},
			TopologyKey:   key, Namespaces: namespaces,
		}
	}
	antiAffine := func(terms ...corev1.PodAffinityTerm) *corev1.Affinity {
		return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}}
	}
	affine := func(terms ...corev1.PodAffinityTerm) *corev1.Affinity {
		return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}}
	}
	pod := func(ns, name string, app string, a *corev1.Affinity) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{Affinity: a},
		}
	}
	nsLabels := func(ns string) map[string]string {
		if ns == "team-a" {
			return map[string]string{"team": "a"}
		}
		return nil
	}
	bySelector := func(key string) corev1.PodAffinityTerm {
		t := term(key)
		t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
		return t
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		placed []placedPod
		ok     map[string]bool
	}{
		{
			name:   "anti-affinity on the hostname keeps the second pause Pod off the first's node",
			pod:    pod("ns", "b", "pause", antiAffine(term(corev1.LabelHostname, "ns"))),
			placed: []placedPod{{pod("ns", "a", "pause", antiAffine(term(corev1.LabelHostname, "ns"))), "node-1"}},
			ok:     map[string]bool{"node-1": false, "node-2": true, "node-3": true},
		},
		{
			name:   "anti-affinity on the zone keeps it out of the zone",
			pod:    pod("ns", "b", "pause", antiAffine(term(corev1.LabelTopologyZone))),
			placed: []placedPod{{pod("ns", "a", "pause", nil), "node-1"}},
			ok:     map[string]bool{"node-1": false, "node-2": false, "node-3": true},
		},
		{
			name:   "a placed Pod's anti-affinity against the new one",
			pod:    pod("ns", "b", "pause", nil),
			placed: []placedPod{{pod("ns", "a", "other", antiAffine(term(corev1.LabelHostname))), "node-2"}},
			ok:     map[string]bool{"node-1": true, "node-2": false, "node-3": true},
		},
		{
			name:   "anti-affinity only within the term's namespaces",
			pod:    pod("ns", "b", "pause", antiAffine(term(corev1.LabelHostname))),
			placed: []placedPod{{pod("other-ns", "a", "pause", nil), "node-1"}},
			ok:     map[string]bool{"node-1": true, "node-2": true, "node-3": true},
		},
		{
			name:   "anti-affinity to the namespaces a selector picks",
			pod:    pod("ns", "b", "pause", antiAffine(bySelector(corev1.LabelHostname))),
			placed: []placedPod{{pod("team-a", "a", "pause", nil), "node-1"}, {pod("team-b", "c", "pause", nil), "node-2"}},
			ok:     map[string]bool{"node-1": false, "node-2": true, "node-3": true},
		},
		{
			name:   "affinity to a zone's Pod",
			pod:    pod("ns", "b", "client", affine(term(corev1.LabelTopologyZone))),
			placed: []placedPod{{pod("ns", "a", "pause", nil), "node-3"}},
			ok:     map[string]bool{"node-1": false, "node-2": false, "node-3": true},
		},
		{
			name: "affinity with no matching Pod anywhere, the Pod matching its own term, starts the group",
			pod:  pod("ns", "b", "pause", affine(term(corev1.LabelHostname))),
			ok:   map[string]bool{"node-1": true, "node-2": true, "node-3": true},
		},
		{
			name: "affinity with no matching Pod anywhere",
			pod:  pod("ns", "b", "client", affine(term(corev1.LabelHostname))),
			ok:   map[string]bool{"node-1": false, "node-2": false, "node-3": false},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, want := range tc.ok {
				why := interPodAffinityReason(tc.pod, nodes[name], tc.placed, nodes, nsLabels)
				if (why == "") != want {
					t.Errorf("%s: reason %q, want schedulable %v", name, why, want)
				}
			}
		})
	}
}

func TestSelectsNamespaces(t *testing.T) {
	withSelector := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname, NamespaceSelector: &metav1.LabelSelector{}}},
	}}}}
	withNames := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: corev1.LabelHostname, Namespaces: []string{"a"}}},
	}}}}
	if !selectsNamespaces(withSelector) || selectsNamespaces(withNames) || selectsNamespaces(&corev1.Pod{}) {
		t.Errorf("selectsNamespaces: with a selector %v, with names %v, without affinity %v; want true, false, false",
			selectsNamespaces(withSelector), selectsNamespaces(withNames), selectsNamespaces(&corev1.Pod{}))
	}
}
