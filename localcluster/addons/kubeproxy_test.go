// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package addons

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/dataplane/agent"
)

// The patch `svcnet up --kube-proxy` applies is step 1 of
// docs/operations.md's move from kube-proxy, as the page prints it, and
// keeps kube-proxy's Pods to the nodes labelled for it.
func TestKubeProxyOnlyWhereLabelled(t *testing.T) {
	var ds appsv1.DaemonSet
	if err := json.Unmarshal([]byte(KubeProxyOnlyWhereLabelled), &ds); err != nil {
		t.Fatal(err)
	}
	terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	want := corev1.NodeSelectorRequirement{Key: agent.LabelNodeProxy, Operator: corev1.NodeSelectorOpIn, Values: []string{agent.NodeProxyKubeProxy}}
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 1 || terms[0].MatchExpressions[0].Key != want.Key ||
		terms[0].MatchExpressions[0].Operator != want.Operator || strings.Join(terms[0].MatchExpressions[0].Values, ",") != agent.NodeProxyKubeProxy {
		t.Errorf("node affinity %+v, want %+v", terms, want)
	}

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(doc)), ""), "-p='"+KubeProxyOnlyWhereLabelled+"'") {
		t.Errorf("docs/operations.md's step 1 is not the patch svcnet up applies: -p='%s'", KubeProxyOnlyWhereLabelled)
	}
}

// kube-proxy's image runs the binary at the path of kubeadm's command.
func TestKubeProxyNodeImage(t *testing.T) {
	img := KubeProxyNodeImage("/bin/k8s/kube-proxy")
	objs := KubeadmKubeProxy("https://192.0.2.1:6443", nil)
	ds := objs[len(objs)-1].(*appsv1.DaemonSet)
	ctr := ds.Spec.Template.Spec.Containers[0]
	if img.Files[ctr.Command[0]] != "/bin/k8s/kube-proxy" || img.Repositories[0] != "registry.k8s.io/kube-proxy" || ctr.Image != KubeProxyImage {
		t.Errorf("image %+v does not run %q of %s", img, ctr.Command, ctr.Image)
	}
}

// InstallKubeProxy takes step 1 on a new cluster, and on a cluster started
// again creates nothing twice and keeps the moves made since: a node
// given to svcnet stays svcnet's, and a DaemonSet found keeps its spec.
func TestInstallKubeProxyKeepsTheMovesOnRestart(t *testing.T) {
	ctx := context.Background()
	apiSlice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](6443)}},
	}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}
	c := fake.NewClientBuilder().WithObjects(apiSlice, n1, n2).Build()
	labelOf := func(name string) string {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Labels[agent.LabelNodeProxy]
	}
	dsOf := func() *appsv1.DaemonSet {
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: KubeProxyName}, &ds); err != nil {
			t.Fatal(err)
		}
		return &ds
	}

	if err := InstallKubeProxy(ctx, c, []byte("mode: iptables\n")); err != nil {
		t.Fatal(err)
	}
	if labelOf("node-1") != agent.NodeProxyKubeProxy || labelOf("node-2") != agent.NodeProxyKubeProxy {
		t.Errorf("labels %q, %q: want every node kube-proxy's", labelOf("node-1"), labelOf("node-2"))
	}
	if dsOf().Spec.Template.Spec.Affinity == nil {
		t.Error("the DaemonSet was created without step 1's node affinity")
	}

	// The operator moves node-1 and changes the DaemonSet; the cluster
	// starts again.
	var moved corev1.Node
	must(t, c.Get(ctx, client.ObjectKey{Name: "node-1"}, &moved))
	must(t, LabelNode(ctx, c, &moved, agent.LabelNodeProxy, "svcnet"))
	ds := dsOf()
	ds.Spec.Template.Spec.Affinity = nil
	must(t, c.Update(ctx, ds))
	must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}}))
	if err := InstallKubeProxy(ctx, c, []byte("mode: iptables\n")); err != nil {
		t.Fatalf("a second start: %v", err)
	}
	if got := labelOf("node-1"); got != "svcnet" {
		t.Errorf("node-1 moved to svcnet is labelled %q after a restart", got)
	}
	if got := labelOf("node-3"); got != agent.NodeProxyKubeProxy {
		t.Errorf("a new node is labelled %q, want kube-proxy's", got)
	}
	if dsOf().Spec.Template.Spec.Affinity != nil {
		t.Error("a restart patched the DaemonSet it found")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
