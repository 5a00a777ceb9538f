// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// TestUpNFTables runs the walkthrough with `--proxy-mode=nftables`, with
// svcnet's pipeline and with the upstream one (kube-proxy's nftables
// mode), then checks on its own that every node's table gives web its 10
// endpoints, that the client reaches them, and that no iptables-mode rule
// was written.
func TestUpNFTables(t *testing.T) {
	requireNetns(t)
	for _, tc := range []struct {
		pipeline, table string
		shown           []string
		count           func(table string, web *corev1.Service) int
	}{
		{"svcnet", nftables.TableName, []string{"numgen random mod 3 map @endpoints-tcp-3", `. tcp . 80 . 0 comment "demo/web"`},
			func(table string, web *corev1.Service) int {
				return nftables.EndpointCount(table, web.Spec.ClusterIP+" . tcp . 80")
			}},
		{"upstream", nftables.KubeProxyTableName, []string{"numgen random mod 3"},
			func(table string, web *corev1.Service) int {
				return nftables.KubeProxyEndpointCount(table, "demo", "web", "", corev1.ProtocolTCP)
			}},
	} {
		t.Run(tc.pipeline, func(t *testing.T) { testUpNFTables(t, tc.pipeline, tc.table, tc.shown, tc.count) })
	}
}

func testUpNFTables(t *testing.T, pipeline, tableName string, shown []string, count func(string, *corev1.Service) int) {
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--proxy-mode=nftables", "--pipeline="+pipeline, "--demo"))
	waitOutput(t, up, "Walkthrough complete", walkthroughTimeout)
	out := up.out.String()
	for _, want := range append([]string{"nodes were reprogrammed with 10 endpoints"}, shown...) {
		if !strings.Contains(out, want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	c := kubeClient(t, dataDir)
	var web corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("demo"), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	podNames := map[string]bool{}
	for _, p := range pods.Items {
		// The walkthrough scaled web down: the Pods it removed may still be
		// terminating (their grace period), out of the Service already.
		if p.DeletionTimestamp != nil {
			continue
		}
		podNames[p.Name] = true
	}
	for _, n := range []string{"svcnet-node-1", "svcnet-node-2"} {
		table, err := exec.Command("ip", "netns", "exec", n, "nft", "list", "table", "ip", tableName).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", n, err, table)
		}
		if got := count(string(table), &web); got != 10 {
			t.Errorf("%s: table %s gives web %d endpoints, want 10:\n%s", n, tableName, got, table)
		}
		save, err := exec.Command("ip", "netns", "exec", n, "iptables-save").CombinedOutput()
		if err != nil || strings.Contains(string(save), "KUBE-SVC-") {
			t.Errorf("%s: iptables-mode rules in nftables mode (%v):\n%s", n, err, save)
		}
	}
	reachAll(t, "svcnet-client", "http://"+web.Spec.ClusterIP+"/", podNames)
}
