// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package addons

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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
