// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/explain"
	"github.com/svcnet-io/svcnet/internal/lbclass"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestGatherFromAnAPIServer reads a Service's path from a real API
// server, healthy and then broken, and runs `kubectl svcnet explain` as
// kubectl's plugin.
func TestGatherFromAnAPIServer(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c := env.Client
	ns, err := env.Namespace(ctx, "explain")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}))
	svc := builder.Service("web", ns).Selector("app", "web").Port("http", 80, intstr.FromString("http")).Obj()
	must(c.Create(ctx, svc))
	for _, name := range []string{"web-1", "client"} {
		b := builder.Pod(name, ns).Node("node-1")
		if name == "web-1" {
			b = b.Label("app", "web").ContainerPort("http", 8080)
		}
		pod := b.Obj()
		must(c.Create(ctx, pod))
		pod.Status = *builder.Pod(name, ns).IP("10.244.1.5").Ready().Obj().Status.DeepCopy()
		must(c.Status().Update(ctx, pod))
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-x", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("node-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}}}
	must(c.Create(ctx, slice))
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	from := explain.From{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"}}}

	report := func() explain.Report {
		t.Helper()
		in, err := explain.Gather(ctx, c, key, from, lbclass.DefaultSelection())
		if err != nil {
			t.Fatal(err)
		}
		return explain.Analyze(in)
	}
	t.Run("healthy but for cluster DNS, which this API server has not", func(t *testing.T) {
		r := report()
		if r.Broken == nil || r.Broken.Hop != explain.HopName || !strings.Contains(r.Broken.Problem, "there is no Service kube-system/kube-dns") {
			t.Fatalf("report: %+v", r)
		}
		if !strings.Contains(strings.Join(r.Hops[1].Facts, "\n"), "(IPAddress "+svc.Spec.ClusterIP+")") {
			t.Errorf("the service hop does not name the ClusterIP's IPAddress: %q", r.Hops[1].Facts)
		}
	})

	must(c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-dns"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-dns"}, Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}))
	must(c.Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-dns-x", Labels: map[string]string{discoveryv1.LabelServiceName: "kube-dns"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.2"}}}}))
	t.Run("healthy", func(t *testing.T) {
		if r := report(); !r.Works {
			t.Fatalf("report: %+v", r)
		}
	})

	t.Run("a client Pod that does not exist is an error, not a report", func(t *testing.T) {
		_, err := explain.Gather(ctx, c, key, explain.From{Pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}}}, lbclass.DefaultSelection())
		if err == nil || !strings.Contains(err.Error(), "the client Pod "+ns+"/nobody does not exist") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a Service that does not exist: would the API server take one now (a dry run)", func(t *testing.T) {
		missing := types.NamespacedName{Namespace: ns, Name: "missing"}
		in, err := explain.Gather(ctx, c, missing, explain.From{}, lbclass.DefaultSelection())
		must(err)
		if in.CreateRefused != "" {
			t.Fatalf("a namespace that takes Services: refused %q", in.CreateRefused)
		}
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-more-services"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("1")}}}
		must(c.Create(ctx, quota))
		// What kube-controller-manager's quota controller would count; this
		// API server runs none.
		quota.Status = corev1.ResourceQuotaStatus{Hard: quota.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("1")}}
		must(c.Status().Update(ctx, quota))
		var r explain.Report
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			// Until the quota admission's cache has the status.
			in, err = explain.Gather(ctx, c, missing, explain.From{}, lbclass.DefaultSelection())
			must(err)
			if r = explain.Analyze(in); r.Broken != nil && strings.Contains(r.Broken.Problem, "refuses to create it now") {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r.Broken == nil || !strings.Contains(r.Broken.Problem, "exceeded quota") || strings.Contains(r.Broken.Fix, "ServiceCIDR") {
			t.Fatalf("broken: %+v, want the quota named", r.Broken)
		}
		var list corev1.ServiceList
		must(c.List(ctx, &list, client.InNamespace(ns)))
		if len(list.Items) != 1 {
			t.Errorf("%d Services in %s after the dry runs, want web alone", len(list.Items), ns)
		}
	})

	t.Run("kubectl svcnet explain, broken: the slice names no ready endpoint", func(t *testing.T) {
		slice.Endpoints[0].Conditions.Ready = ptr.To(false)
		must(c.Update(ctx, slice))
		out, code := kubectlSvcnet(t, env, "explain", "svc/web", "-n", ns, "--from", "pod/client", "-o", "json")
		if code != 1 {
			t.Fatalf("exit status %d, want 1 (broken):\n%s", code, out)
		}
		var r explain.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		if r.Broken == nil || r.Broken.Hop != explain.HopEndpointSlice || !strings.Contains(r.Broken.Problem, "Ready Pod(s) web-1 are not ready endpoints") {
			t.Fatalf("broken: %+v", r.Broken)
		}
		if _, code := kubectlSvcnet(t, env, "explain", "svc/nothing", "-n", ns); code != 1 {
			t.Errorf("a Service that does not exist: exit status %d, want 1", code)
		}
		if out, code := kubectlSvcnet(t, env, "explain", "svc/web", "-n", ns, "--from", "pod/nobody"); code != 2 || !strings.Contains(out, "does not exist") {
			t.Errorf("a client that does not exist: exit status %d, want 2:\n%s", code, out)
		}
	})
}

// kubectlSvcnet runs `kubectl svcnet args...` with the svcnet binary built
// from this tree as the plugin kubectl-svcnet on the PATH, and returns
// its output and exit status.
func kubectlSvcnet(t *testing.T, env *testenv.Env, args ...string) (string, int) {
	t.Helper()
	dir := pluginDir(t)
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, "kubectl"), append([]string{"svcnet"}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("kubectl svcnet: %v\n%s", err, out)
	return "", 0
}

var pluginBuilt string

// pluginDir builds ./cmd/svcnet once as kubectl-svcnet.
func pluginDir(t *testing.T) string {
	t.Helper()
	if pluginBuilt != "" {
		return pluginBuilt
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-svcnet"), "../../cmd/svcnet").CombinedOutput()
	if err != nil {
		t.Fatalf("building kubectl-svcnet: %v\n%s", err, out)
	}
	pluginBuilt = dir
	return dir
}
