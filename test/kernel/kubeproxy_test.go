// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/kubeadm"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// startKubeadmAgent runs the agent on node n as kubeadm's kube-proxy
// DaemonSet runs kube-proxy, only the binary swapped:
// `--config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)`,
// as a process inside the node's network namespace.
func (c *cluster) startKubeadmAgent(t *testing.T, n *netlab.Node, config string, out *bytes.Buffer) *exec.Cmd {
	t.Helper()
	return startInNode(t, n, kubeProxyProcess, out, "--config="+config, "--hostname-override="+n.Name)
}

// writeKubeadmConfig writes the cluster's kubeconfig and a kubeadm
// config.conf naming it, as the DaemonSet mounts them.
func (c *cluster) writeKubeadmConfig(t *testing.T, maxPerCore, floor any) string {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig.conf")
	if err := c.env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// kubeadm's file with what this test changes: nftables mode,
	// conntrack settings a private network namespace can take
	// (nf_conntrack_max is the host's), and the kubeconfig's path.
	file, err := kubeadm.KubeProxyConfig(map[string]any{
		"clientConnection.kubeconfig": kubeconfig,
		"conntrack.maxPerCore":        maxPerCore,
		"conntrack.min":               floor,
		"conntrack.tcpBeLiberal":      true,
		"conntrack.udpStreamTimeout":  "150s",
		"conntrack.udpTimeout":        "45s",
		"logging.verbosity":           2,
		"mode":                        "nftables",
	})
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.conf")
	if err := os.WriteFile(config, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// TestKubeadmDaemonSet runs the agent with kubeadm's kube-proxy command
// line and file against a real API server, and checks what kube-proxy
// would have done on the node: the Service's rules programmed, NodePorts
// on the Node's primary IP (nftables mode's default), and the node's
// conntrack sysctls as the file says.
func TestKubeadmDaemonSet(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, agent.ModeNFTables, "svcnet-kp", 1, endpointslice.ControllerName)
	n := c.nodes[0]
	c.forwardAPIServer(t, n)
	var out bytes.Buffer
	cmd := c.startKubeadmAgent(t, n, c.writeKubeadmConfig(t, 0, nil), &out)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("agent output:\n%s\nrules:\n%s", out.String(), c.rules(n))
		}
	})

	ns, err := c.env.Namespace(ctx, t.Name())
	g.Expect(err).NotTo(HaveOccurred())
	c.addPods(t, ns, "kp", n, 1)
	svc := webService(ns, "kp")
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = c.service(t, svc)
	outside := netlab.Client(c.client, 2*time.Second)
	g.Eventually(func() (string, error) {
		return netlab.Get(ctx, outside, fmt.Sprintf("http://%s:%d/", n.IP, svc.Spec.Ports[0].NodePort))
	}).WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"), "NodePort on %s", n.Name)

	set, err := c.lab.Run(n.NetNS, "nft", "list", "set", "ip", nftables.TableName, "nodeport-ips")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(set).To(ContainSubstring(n.IP.String()), "primary: the Node's InternalIP accepts NodePorts")
	g.Expect(set).NotTo(ContainSubstring("127.0.0.1"), "primary: loopback does not")

	for name, want := range map[string]int{
		"nf_conntrack_tcp_be_liberal":          1,
		"nf_conntrack_udp_timeout":             45,
		"nf_conntrack_udp_timeout_stream":      150,
		"nf_conntrack_tcp_timeout_established": 86400, // kube-proxy's default, the file's null
		"nf_conntrack_tcp_timeout_close_wait":  3600,
	} {
		got, err := c.lab.Run(n.NetNS, "cat", "/proc/sys/net/netfilter/"+name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(strings.TrimSpace(got)).To(Equal(strconv.Itoa(want)), name)
	}
}

// TestKubeadmDaemonSetConntrackMax checks that, like kube-proxy, the agent
// does not start when the file asks for an nf_conntrack_max the node's
// namespace cannot take, and says which setting to change.
func TestKubeadmDaemonSetConntrackMax(t *testing.T) {
	requireKernel(t)
	c := newCluster(t, agent.ModeNFTables, "svcnet-kq", 1)
	n := c.nodes[0]
	c.forwardAPIServer(t, n)
	cur, err := c.lab.Run(n.NetNS, "cat", "/proc/sys/net/netfilter/nf_conntrack_max")
	if err != nil {
		t.Fatal(err)
	}
	current, err := strconv.Atoi(strings.TrimSpace(cur))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := c.startKubeadmAgent(t, n, c.writeKubeadmConfig(t, 1, current+4096), &out)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err == nil || !strings.Contains(out.String(), "--conntrack-max-per-core") {
			t.Errorf("agent exited with %v, output:\n%s\nwant a failure naming --conntrack-max-per-core", err, out.String())
		}
	case <-time.After(converge):
		_ = cmd.Process.Kill()
		t.Logf("agent killed: %v", <-exited)
		t.Fatalf("agent still runs with an nf_conntrack_max it cannot set; output:\n%s", out.String())
	}
}
