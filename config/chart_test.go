// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/svcnet-io/svcnet/test/testenv"
)

// chartDir is the Helm chart beside the kustomize tree.
const chartDir = "../charts/svcnet"

// helmLabels are the labels the chart adds to every object, which
// config/default does not have.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// helmBinary is bin/tools/helm (make helm); the test skips without it,
// and fails under SVCNET_REQUIRE_NETNS (CI, where make test builds it).
func helmBinary(t *testing.T) string {
	t.Helper()
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(filepath.Dir(bins), "tools", "helm")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("SVCNET_REQUIRE_NETNS") != "" {
			t.Fatalf("%s is missing: make helm", p)
		}
		t.Skipf("%s is missing: make helm", p)
	}
	return p
}

// objects decodes a multi-document YAML stream by kind/name.
func objects(t *testing.T, out []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := objs[key]; dup {
			t.Errorf("%s twice", key)
		}
		objs[key] = u
	}
}

func helmTemplate(t *testing.T, helm string, set ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "svcnet", chartDir, "--namespace", "svcnet-system"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return objects(t, out)
}

// withoutHelm removes what the chart adds by design: Helm's labels, the
// CRDs' keep policy, and image tags (the chart's appVersion, kustomize's
// newTag).
func withoutHelm(u *unstructured.Unstructured) *unstructured.Unstructured {
	u = u.DeepCopy()
	labels := u.GetLabels()
	for _, l := range helmLabels {
		delete(labels, l)
	}
	u.SetLabels(labels)
	if len(labels) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	}
	ann := u.GetAnnotations()
	delete(ann, "helm.sh/resource-policy")
	u.SetAnnotations(ann)
	if len(ann) == 0 {
		unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
	}
	containers, found, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if found {
		for _, c := range containers {
			ctr := c.(map[string]any)
			if img, ok := ctr["image"].(string); ok {
				if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
					ctr["image"] = img[:i]
				}
			}
			delete(ctr, "imagePullPolicy") // kubectl's default for a tag other than latest
		}
		_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
	}
	return u
}

// TestChartRendersConfigDefault: the chart at its default values renders
// the objects config/default builds, field for field, but for Helm's
// labels, image tags, and the Namespace (helm install
// --create-namespace makes it); so the two never drift.
func TestChartRendersConfigDefault(t *testing.T) {
	helm := helmBinary(t)
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bins, "kubectl"), "kustomize", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	kustomized := objects(t, out)
	delete(kustomized, "Namespace/svcnet-system")
	charted := helmTemplate(t, helm)
	var keys []string
	for k := range kustomized {
		keys = append(keys, k)
	}
	for k := range charted {
		if _, ok := kustomized[k]; !ok {
			t.Errorf("the chart renders %s, which config/default does not have", k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		c, ok := charted[k]
		if !ok {
			t.Errorf("config/default has %s, which the chart does not render", k)
			continue
		}
		if diff := cmp.Diff(withoutHelm(kustomized[k]).Object, withoutHelm(c).Object); diff != "" {
			t.Errorf("%s: the chart differs from config/default (-kustomize +helm):\n%s", k, diff)
		}
		for _, l := range helmLabels {
			if _, ok := c.GetLabels()[l]; !ok {
				t.Errorf("%s: the chart does not label it %s", k, l)
			}
		}
	}
}

// TestChartValues: each value reaches the object it is for.
func TestChartValues(t *testing.T) {
	helm := helmBinary(t)
	objs := helmTemplate(t, helm,
		"manager.replicas=3", "manager.controllers={*,-nodeport}", "manager.serviceNodePortRange=31000-31999",
		"manager.enableHTTP2=true", "agent.mode=nftables", "agent.clusterCIDR=10.200.0.0/16",
		"agent.apiServer.host=192.0.2.10", "agent.apiServer.port=6443",
		"image.manager.repository=registry.example/svcnet", "image.agent.tag=v9",
		"agent.tolerations=null", "manager.resources.limits.memory=2Gi",
		"pools[0].name=default", "pools[0].spec.cidrs={192.168.240.0/24}", "crds.keep=false",
	)
	container := func(key string) map[string]any {
		t.Helper()
		u, ok := objs[key]
		if !ok {
			t.Fatalf("no %s", key)
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		return cs[0].(map[string]any)
	}
	mgr, agent := container("Deployment/svcnet-manager"), container("DaemonSet/svcnet-agent")
	args := func(c map[string]any) []string {
		a, _, _ := unstructured.NestedStringSlice(c, "args")
		return a
	}
	for _, want := range []string{"--controllers=*,-nodeport", "--service-node-port-range=31000-31999", "--enable-http2"} {
		if !slices.Contains(args(mgr), want) {
			t.Errorf("manager args %q lack %s", args(mgr), want)
		}
	}
	for _, want := range []string{"--mode=nftables", "--cluster-cidr=10.200.0.0/16"} {
		if !slices.Contains(args(agent), want) {
			t.Errorf("agent args %q lack %s", args(agent), want)
		}
	}
	if n, _, _ := unstructured.NestedFieldNoCopy(objs["Deployment/svcnet-manager"].Object, "spec", "replicas"); fmt.Sprint(n) != "3" {
		t.Errorf("manager replicas %v, want 3", n)
	}
	if mgr["image"] != "registry.example/svcnet:latest" || agent["image"] != "ghcr.io/svcnet-io/svcnet-agent:v9" {
		t.Errorf("images %v and %v", mgr["image"], agent["image"])
	}
	if m, _, _ := unstructured.NestedString(mgr, "resources", "limits", "memory"); m != "2Gi" {
		t.Errorf("manager memory limit %q, want 2Gi", m)
	}
	if _, found, _ := unstructured.NestedSlice(objs["DaemonSet/svcnet-agent"].Object, "spec", "template", "spec", "tolerations"); found {
		t.Error("agent.tolerations=null still renders tolerations")
	}
	if data, _, _ := unstructured.NestedStringMap(objs["ConfigMap/svcnet-agent-apiserver"].Object, "data"); data["host"] != "192.0.2.10" || data["port"] != "6443" {
		t.Errorf("agent API server ConfigMap data %v", data)
	}
	pool, ok := objs["LoadBalancerIPPool/default"]
	if cidrs, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", "cidrs"); !ok || !slices.Equal(cidrs, []string{"192.168.240.0/24"}) {
		t.Errorf("pool default: %v", pool)
	}
	for k, u := range objs {
		if u.GetKind() == "CustomResourceDefinition" && u.GetAnnotations()["helm.sh/resource-policy"] != "" {
			t.Errorf("%s keeps a resource policy with crds.keep=false", k)
		}
	}
}

// TestChartLint: helm lint --strict passes (warnings are failures).
func TestChartLint(t *testing.T) {
	helm := helmBinary(t)
	if out, err := exec.Command(helm, "lint", "--strict", chartDir).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict: %v\n%s", err, out)
	}
}
