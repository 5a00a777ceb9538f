// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/testenv"
)

// hostnameImage answers every request on 9376 with the Pod's name (the
// Kubernetes docs' "Debug Services" image), run for real by the nodes.
const hostnameImage = "registry.k8s.io/serve_hostname"

// kubectl runs the kubectl of bin/k8s against svcnet up's cluster and
// returns its stdout and stderr.
func kubectl(t *testing.T, dataDir string, args ...string) (string, string, error) {
	t.Helper()
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bins, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dataDir, "kubeconfig"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// seedsDemo is the demo a user follows on a kind cluster, verbatim: an
// nginx Deployment of 3 behind my-service, a busybox Pod fetching the
// Service by name (kubectl run -i --rm), kubectl exec and logs on the
// nginx Pods, and a scale to 10.
func seedsDemo(t *testing.T, dataDir string, c client.Client) {
	ctx := context.Background()
	must := func(args ...string) string {
		t.Helper()
		out, errOut, err := kubectl(t, dataDir, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	must("create", "deployment", "nginx", "--image=nginx", "--replicas=3")
	must("expose", "deployment", "nginx", "--name=my-service", "--port=80")
	must("rollout", "status", "deployment/nginx", "--timeout=90s")

	out := must("run", "curl", "--rm", "-i", "--restart=Never", "--image=busybox:1.36", "--", "wget", "-q", "-O", "-", "http://my-service")
	if n := strings.Count(out, "<title>Welcome to nginx!</title>"); n != 1 {
		t.Errorf("kubectl run curl ... wget http://my-service printed the welcome page %d times, want once:\n%s", n, out)
	}

	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"app": "nginx"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if got := strings.TrimSpace(must("exec", p.Name, "--", "cat", "/etc/hostname")); got != p.Name {
			t.Errorf("kubectl exec %s -- cat /etc/hostname: %q", p.Name, got)
		}
	}
	_, errOut, err := kubectl(t, dataDir, "exec", pods.Items[0].Name, "--", "nginx", "-v")
	if err != nil || !strings.Contains(errOut, "nginx version: nginx/") {
		t.Errorf("kubectl exec -- nginx -v: %v %q, want the version of the real nginx", err, errOut)
	}
	if _, _, err := kubectl(t, dataDir, "exec", pods.Items[0].Name, "--", "false"); err == nil {
		t.Error("kubectl exec -- false succeeded; the exit code is lost")
	}
	logs := must("logs", "-l", "app=nginx", "--prefix", "--tail=-1")
	if !strings.Contains(logs, `"GET / HTTP/1.1" 200`) || !strings.Contains(logs, "Wget") {
		t.Errorf("kubectl logs on the nginx Pods shows no access log line of busybox's request:\n%s", logs)
	}

	must("scale", "deployment", "nginx", "--replicas=10")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "my-service"}); err != nil {
			return false, err
		}
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready++
				}
			}
		}
		return ready == 10, nil
	}); err != nil {
		t.Errorf("my-service does not have 10 ready endpoints after the scale: %v", err)
	}
	out = must("run", "curl2", "--rm", "-i", "--restart=Never", "--image=busybox:1.36", "--", "wget", "-q", "-O", "-", "http://my-service")
	if !strings.Contains(out, "<title>Welcome to nginx!</title>") {
		t.Errorf("after the scale, my-service does not answer:\n%s", out)
	}
}
