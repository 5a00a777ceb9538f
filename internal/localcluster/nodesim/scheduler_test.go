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
