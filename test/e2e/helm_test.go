// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/up"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// helmCmd runs bin/tools/helm against the cluster of dataDir.
func helmCmd(t *testing.T, dataDir string, args ...string) string {
	t.Helper()
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(bins), "tools", "helm"), append(args, "--kubeconfig", filepath.Join(dataDir, "kubeconfig"))...)
	cmd.Env = append(os.Environ(), up.HelmEnv(dataDir)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUpHelm runs `svcnet up --nodes=2 --install=helm --demo`: the chart
// installed with helm, its images run by the simulated nodes, the
// walkthrough passing; then `helm upgrade` moves the agents to iptables
// mode and adds a LoadBalancerIPPool, and the upgraded release serves.
func TestUpHelm(t *testing.T) {
	requireNetns(t)
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	name := "helm-e2e"
	upProc := startUp(t, append(args, "--install=helm", "--demo", "--name="+name))
	waitOutput(t, upProc, "Walkthrough complete", walkthroughTimeout)
	c := kubeClient(t, dataDir)

	t.Run("installed by helm, started without restarts, the managers settled", func(t *testing.T) {
		if out := helmCmd(t, dataDir, "status", "svcnet", "-n", svcnetSystem); !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "REVISION: 1") {
			t.Errorf("helm status:\n%s", out)
		}
		noRestarts(t, c, dataDir)
		waitManagers(t, c, "")
	})
	t.Run("helm upgrade: agents to iptables mode, a pool added", func(t *testing.T) {
		helmCmd(t, dataDir, "upgrade", "svcnet", filepath.Join(dataDir, "chart", "svcnet"), "-n", svcnetSystem, "--reuse-values",
			"--set", "agent.mode=iptables", "--set", "pools[0].name=upgraded", "--set", "pools[0].spec.cidrs={192.168.250.0/24}")
		if out := helmCmd(t, dataDir, "status", "svcnet", "-n", svcnetSystem); !strings.Contains(out, "REVISION: 2") {
			t.Errorf("helm status after the upgrade:\n%s", out)
		}
		agentsRolled(t, c, "--mode=iptables")
		pool := &unstructured.Unstructured{}
		pool.SetGroupVersionKind(schema.GroupVersionKind{Group: "networking.svcnet.io", Version: "v1alpha1", Kind: "LoadBalancerIPPool"})
		if err := c.Get(context.Background(), client.ObjectKey{Name: "upgraded"}, pool); err != nil {
			t.Errorf("the pool of the upgrade: %v", err)
		}
		// The agent image's own iptables-nft wrote kube-proxy's chains.
		out, err := exec.Command("ip", "netns", "exec", name+"-node-1", "iptables-save", "-t", "nat").CombinedOutput()
		if err != nil || !strings.Contains(string(out), ":KUBE-SERVICES") {
			t.Errorf("iptables-save in %s-node-1 after the move to iptables mode: %v\n%.2000s", name, err, out)
		}
		webhookAnswers(t, c, dataDir)
		waitManagers(t, c, "")
	})
	stopUp(t, upProc)
}

// agentsRolled waits until every agent Pod runs with arg and is Ready.
func agentsRolled(t *testing.T, c client.Client, arg string) {
	t.Helper()
	ctx := context.Background()
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-agent"}, &ds); err != nil {
			return false, err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(svcnetSystem), client.MatchingLabels{"app.kubernetes.io/name": "svcnet-agent"}); err != nil {
			return false, err
		}
		rolled := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(&p) && slices.Contains(p.Spec.Containers[0].Args, arg) {
				rolled++
			}
		}
		last = fmt.Sprintf("%d of %d agent Pods run %s and are Ready (%d Pods)", rolled, ds.Status.DesiredNumberScheduled, arg, len(pods.Items))
		return rolled == int(ds.Status.DesiredNumberScheduled) && len(pods.Items) == rolled && ds.Status.UpdatedNumberScheduled == ds.Status.DesiredNumberScheduled, nil
	}); err != nil {
		t.Fatalf("agents not rolled to %s: %s", arg, last)
	}
}
