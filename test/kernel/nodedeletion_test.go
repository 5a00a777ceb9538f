// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcnet-io/svcnet/dataplane/agent"
)

// TestAgentExitsOnNodeDeletion deletes the Node of two agents in their
// nodes: the one run as kube-proxy runs (no speaker) exits, as kube-proxy
// does; the one announcing LoadBalancer addresses keeps running to hand
// them over.
func TestAgentExitsOnNodeDeletion(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, agent.ModeNFTables, "svcnet-nd", 2)
	kubeconfig := filepath.Join(c.logDir, "kubeconfig")
	g.Expect(c.env.WriteKubeconfig(kubeconfig)).To(Succeed())
	proxy, speaker := c.nodes[0], c.nodes[1]
	for _, n := range c.nodes {
		c.forwardAPIServer(t, n)
	}
	proxyCmd := c.startAgentProcess(t, proxy, kubeconfig, "--announce=false")
	speakerCmd := c.startAgentProcess(t, speaker, kubeconfig)
	logOf := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(c.logDir, name+".log"))
		return string(b)
	}
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil }
	for _, n := range c.nodes {
		g.Eventually(func() string { return logOf(n.Name) }).WithTimeout(converge).WithPolling(poll).
			Should(ContainSubstring("Starting svcnet agent"))
	}
	g.Consistently(func() bool { return alive(proxyCmd.Process.Pid) }).WithTimeout(time.Second).Should(BeTrue(), "the agent runs while its Node is there")

	for _, n := range c.nodes {
		g.Expect(c.env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}})).To(Succeed())
	}
	g.Eventually(func() bool { return alive(proxyCmd.Process.Pid) }).WithTimeout(converge).WithPolling(poll).
		Should(BeFalse(), "the agent without a speaker exits when its Node is deleted; log:\n%s", logOf(proxy.Name))
	g.Expect(strings.Contains(logOf(proxy.Name), "exiting as kube-proxy does")).To(BeTrue(), "it says why:\n%s", logOf(proxy.Name))
	g.Consistently(func() bool { return alive(speakerCmd.Process.Pid) }).WithTimeout(2*time.Second).Should(BeTrue(),
		"the agent with a speaker keeps running to hand its addresses over")
}
