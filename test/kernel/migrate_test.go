// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/harness/nodecheck"
	"github.com/svcnet-io/svcnet/test/harness/trafficload"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestMigrateFromKubeProxy moves a node from upstream's kube-proxy to the
// agent and back, as docs/operations.md tells an operator to ("Moving
// from kube-proxy"), under traffic: new TCP connections every few
// milliseconds, a long-lived TCP connection and a UDP flow from a Pod to
// a ClusterIP Service. No new connection may fail, the established ones
// must survive both moves, and after each move no rule of the proxy that
// left may remain.
func TestMigrateFromKubeProxy(t *testing.T) {
	requireKernel(t)
	for _, tc := range []struct{ kubeProxy, svcnet string }{
		{agent.ModeIPTables, agent.ModeIPTables},
		{agent.ModeNFTables, agent.ModeNFTables},
		{agent.ModeIPTables, agent.ModeNFTables},
	} {
		t.Run("kube-proxy "+tc.kubeProxy+", svcnet "+tc.svcnet, func(t *testing.T) {
			testMigrateFromKubeProxy(t, tc.kubeProxy, tc.svcnet)
		})
	}
}

// nodeProcess is a proxy running in a node's network namespace.
type nodeProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *lockedWriter
}

// count returns a function counting the lines of the output that hold s.
func (p *nodeProcess) count(s string) func() int {
	return func() int { return strings.Count(p.out.String(), s) }
}

// stop ends the process as a DaemonSet's Pod ends, with SIGTERM, and
// waits for it.
func (p *nodeProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (c *cluster) startNodeProcess(t *testing.T, argv []string, n *netlab.Node, env ...string) *nodeProcess {
	t.Helper()
	return startProcess(t, argv, netlab.Path(n.NetNS), env...)
}

// startProcess runs argv in the network namespace at path (the test's
// own when empty), killed at cleanup, its output logged if the test
// fails.
func startProcess(t *testing.T, argv []string, nsPath string, env ...string) *nodeProcess {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	w := &lockedWriter{w: &bytes.Buffer{}}
	p := &nodeProcess{cmd: cmd, done: make(chan struct{}), out: w}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := cmd.Start
	if nsPath != "" {
		start = func() error { return netns.Do(nsPath, cmd.Start) }
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(argv[0]), w.String())
		}
	})
	return p
}

// startKubeProxy runs upstream's kube-proxy (bin/k8s) on node n in mode,
// with its default health and metrics addresses.
func (c *cluster) startKubeProxy(t *testing.T, n *netlab.Node, kubeconfig, mode string) *nodeProcess {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return c.startNodeProcess(t, []string{filepath.Join(bin, "kube-proxy"), "--kubeconfig=" + kubeconfig, "--hostname-override=" + n.Name,
		"--proxy-mode=" + mode, "--cluster-cidr=10.244.0.0/16", "--conntrack-max-per-core=0", "--v=2"}, n)
}

// startMigratingAgent runs svcnet's agent on node n as the DaemonSet
// does, on kube-proxy's health and metrics addresses.
func (c *cluster) startMigratingAgent(t *testing.T, n *netlab.Node, kubeconfig, mode string) *nodeProcess {
	t.Helper()
	return c.startNodeProcess(t, []string{os.Args[0], "--kubeconfig", kubeconfig, "--node-name", n.Name, "--mode", mode,
		"--cluster-cidr", "10.244.0.0/16", "--conntrack-max-per-core=0", "--announce=false",
		"--healthz-bind-address=0.0.0.0:10256", "--metrics-bind-address=127.0.0.1:10249"}, n, agentProcessEnv+"="+agentProcess)
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// labelNode sets the node's svcnet.io/proxy label.
func (c *cluster) labelNode(t *testing.T, n *netlab.Node, value string) {
	t.Helper()
	ctx := context.Background()
	var node corev1.Node
	if err := c.env.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		t.Fatal(err)
	}
	if err := addons.LabelNode(ctx, c.env.Client, &node, agent.LabelNodeProxy, value); err != nil {
		t.Fatal(err)
	}
}

func testMigrateFromKubeProxy(t *testing.T, kubeProxyMode, svcnetMode string) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, svcnetMode, "svcnet-mg", 1, endpointslice.ControllerName)
	n := c.nodes[0]
	c.forwardAPIServer(t, n)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(c.env.WriteKubeconfig(kubeconfig)).To(Succeed())
	c.labelNode(t, n, agent.NodeProxyKubeProxy)

	ns, err := c.env.Namespace(ctx, "migrate")
	g.Expect(err).NotTo(HaveOccurred())
	c.addPods(t, ns, "web", n, 2)
	svc := c.service(t, webService(ns, "web"))
	c.addUDPPod(t, ns, "udp", n)
	udpSvc := c.service(t, builder.Service("udp", ns).PortProto("dns", 53, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "udp").Obj())
	clientPod, err := n.AddPod(c.nextName("c"), podPort)
	g.Expect(err).NotTo(HaveOccurred())
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	hc := netlab.Client(clientPod.NetNS, 2*time.Second)

	// kube-proxy serves the node.
	kubeProxy := c.startKubeProxy(t, n, kubeconfig, kubeProxyMode)
	g.Eventually(func() error { _, err := netlab.Get(ctx, hc, url); return err }).
		WithTimeout(converge).WithPolling(poll).Should(Succeed(), "kube-proxy serves the Service")

	load := startMigrationLoad(t, clientPod.NetNS, svc.Spec.ClusterIP, udpSvc.Spec.ClusterIP)
	defer load.Stop()
	addIPVSLeftovers(t, c, n)

	// The agent starts beside it, on standby: it writes nothing.
	svcnetAgent := c.startMigratingAgent(t, n, kubeconfig, svcnetMode)
	g.Eventually(svcnetAgent.count("standing by")).WithTimeout(converge).WithPolling(poll).Should(Equal(1))
	if tables, _ := c.lab.Run(n.NetNS, "nft", "list", "tables"); strings.Contains(tables, "table ip "+nftables.TableName) {
		t.Fatalf("on standby the agent created its table:\n%s", tables)
	}

	// The node moves to svcnet: the label first, and kube-proxy's Pod
	// then leaves the node, as its DaemonSet's node affinity says.
	c.labelNode(t, n, "svcnet")
	g.Eventually(svcnetAgent.count("taking its rules over")).WithTimeout(converge).WithPolling(poll).Should(Equal(1))
	kubeProxy.stop()
	g.Eventually(func() string { return kubeProxyRules(c, n, svcnetMode) }).WithTimeout(converge).WithPolling(poll).Should(BeEmpty(),
		"kube-proxy's rules left on the node after the move to svcnet")
	expectServing(g, load, "svcnet alone")

	// And back: the label, then kube-proxy's Pod returns; once its rules
	// serve, the agent removes its own and its Pod goes.
	c.labelNode(t, n, agent.NodeProxyKubeProxy)
	g.Eventually(svcnetAgent.count("standing by")).WithTimeout(converge).WithPolling(poll).Should(Equal(2))
	kubeProxy = c.startKubeProxy(t, n, kubeconfig, kubeProxyMode)
	if svcnetMode == agent.ModeNFTables {
		g.Eventually(func() (string, error) { return c.lab.Run(n.NetNS, "nft", "list", "tables") }).
			WithTimeout(converge).WithPolling(poll).ShouldNot(ContainSubstring("table ip "+nftables.TableName+"\n"),
			"svcnet's table left once kube-proxy's rules serve the node")
	} else {
		g.Eventually(kubeProxy.count("SyncProxyRules complete")).WithTimeout(converge).WithPolling(poll).Should(BeNumerically(">", 0))
	}
	svcnetAgent.stop()
	expectServing(g, load, "kube-proxy again")

	expectNoFailure(t, g, load.Stop())
}

// addIPVSLeftovers leaves on node n what kube-proxy's ipvs mode would
// have, had the node run it once: a chain of its own with a jump into
// it, and its kube-ipvs0 device (a veth here: this kernel may lack
// dummy devices; only the name matters).
func addIPVSLeftovers(t *testing.T, c *cluster, n *netlab.Node) {
	t.Helper()
	for _, argv := range [][]string{
		{"iptables", "-t", "nat", "-N", "KUBE-LOAD-BALANCER"},
		{"iptables", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-LOAD-BALANCER"},
		{"ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kube-ipvs0p"},
	} {
		if out, err := c.lab.Run(n.NetNS, argv...); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
}

// kubeProxyRules is what kube-proxy left on node n, which the agent
// serves in mode (nodecheck.KubeProxyLeftovers).
func kubeProxyRules(c *cluster, n *netlab.Node, mode string) string {
	return nodecheck.KubeProxyLeftovers(c.runOn(n), mode)
}

// runOn runs commands in node n's network namespace.
func (c *cluster) runOn(n *netlab.Node) nodecheck.Run {
	return func(argv ...string) (string, error) { return c.lab.Run(n.NetNS, argv...) }
}

// startMigrationLoad is a migration's load from a Pod: new TCP
// connections to a ClusterIP Service, one long-lived connection to it,
// and a UDP flow to another.
func startMigrationLoad(t *testing.T, podNS, clusterIP, udpClusterIP string) *trafficload.Load {
	t.Helper()
	l := newMigrationLoad(t)
	l.NewConnections(podNS, "http://"+net.JoinHostPort(clusterIP, "80")+"/")
	for _, err := range []error{l.KeepConnection(podNS, clusterIP), l.UDPFlow(podNS, net.JoinHostPort(udpClusterIP, "53"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// newMigrationLoad is a load without flows yet; it stops at cleanup.
func newMigrationLoad(t *testing.T) *trafficload.Load {
	l := trafficload.New()
	t.Cleanup(func() { l.Stop() })
	return l
}

// expectServing checks that load still gets answers on every flow.
func expectServing(g Gomega, load *trafficload.Load, what string) {
	before := load.Snapshot()
	g.Eventually(func() bool { return load.AnsweredSince(before) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue(), "traffic answered with %s", what)
}

// expectNoFailure checks a stopped load's result: nothing failed.
func expectNoFailure(t *testing.T, g Gomega, r trafficload.Result) {
	t.Helper()
	t.Log(r.Summary())
	g.Expect(r.NewFailed).To(BeEmpty(), "failed new connections")
	g.Expect(r.KeptBroken).To(BeEmpty(), "the long-lived connection broke")
	g.Expect(r.UDPLost).To(BeEmpty(), "UDP exchanges unanswered")
	g.Expect(r.NewOK).To(BeNumerically(">", 100), "the load ran")
}

// startKubeControllerManager runs upstream's kube-controller-manager
// (bin/k8s) with only the controllers svcnet replaces, as kube-controller-
// manager runs them before the move.
func (c *cluster) startKubeControllerManager(t *testing.T, kubeconfig string) *nodeProcess {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return startProcess(t, []string{filepath.Join(bin, "kube-controller-manager"), "--kubeconfig=" + kubeconfig,
		"--controllers=endpointslice-controller,endpointslice-mirroring-controller",
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false", "--v=2"}, "")
}

// TestMigrateClusterFromUpstream moves a two-node cluster from upstream's
// pipeline (kube-controller-manager's EndpointSlice controllers and
// kube-proxy on every node) to svcnet's and back, in the order
// docs/operations.md gives: the controllers first (svcnet's manager
// starts, then kube-controller-manager's controllers stop), then the
// nodes one at a time; back in the reverse order. A Pod on each node
// opens TCP connections to a ClusterIP Service, one of them keeps a
// connection and a UDP flow open, a client outside opens connections to
// its NodePort, and the Service gains an endpoint under each pipeline: no
// request may fail.
func TestMigrateClusterFromUpstream(t *testing.T) {
	requireKernel(t)
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) { testMigrateCluster(t, mode) })
	}
}

func testMigrateCluster(t *testing.T, mode string) {
	g := NewWithT(t)
	ctx := context.Background()
	c := newBareCluster(t, mode, "svcnet-mc", 2)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(c.env.WriteKubeconfig(kubeconfig)).To(Succeed())
	for _, n := range c.nodes {
		c.forwardAPIServer(t, n)
		c.labelNode(t, n, agent.NodeProxyKubeProxy)
	}
	kcm := c.startKubeControllerManager(t, kubeconfig)

	ns, err := c.env.Namespace(ctx, "migrate")
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	svc := webService(ns, "web")
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = c.service(t, svc)
	c.addUDPPod(t, ns, "udp", c.nodes[1])
	udpSvc := c.service(t, builder.Service("udp", ns).PortProto("dns", 53, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "udp").Obj())
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	nodePortURL := fmt.Sprintf("http://%s:%d/", c.nodes[1].IP, svc.Spec.Ports[0].NodePort)
	var clients []*netlab.Pod
	kubeProxies := map[string]*nodeProcess{}
	for _, n := range c.nodes {
		p, err := n.AddPod(c.nextName("c"), podPort)
		g.Expect(err).NotTo(HaveOccurred())
		clients = append(clients, p)
		kubeProxies[n.Name] = c.startKubeProxy(t, n, kubeconfig, mode)
	}
	reaches := func(want int) {
		t.Helper()
		for _, p := range clients {
			hc := netlab.Client(p.NetNS, 2*time.Second)
			g.Eventually(func() (map[string]int, error) { return fetchAll(ctx, hc, url, 30) }).
				WithTimeout(converge).WithPolling(poll).Should(HaveLen(want), "endpoints reached from %s", p.Node.Name)
		}
	}
	reaches(2)

	load := startMigrationLoad(t, clients[0].NetNS, svc.Spec.ClusterIP, udpSvc.Spec.ClusterIP)
	defer load.Stop()
	load.NewConnections(clients[1].NetNS, url)
	load.NewConnections(c.client, nodePortURL)
	agents := map[string]*nodeProcess{}
	for _, n := range c.nodes {
		agents[n.Name] = c.startMigratingAgent(t, n, kubeconfig, mode)
		g.Eventually(agents[n.Name].count("standing by")).WithTimeout(converge).WithPolling(poll).Should(Equal(1))
	}

	// The controllers: svcnet's start, then kube-controller-manager's stop;
	// an endpoint added after is svcnet's to publish.
	stopManager := c.startManager(t, endpointslice.ControllerName, controllers.EndpointSliceMirroringName)
	expectServing(g, load, "both controllers")
	kcm.stop()
	c.addPods(t, ns, "web", c.nodes[0], 1)
	reaches(3)

	// The nodes, one at a time.
	for _, n := range c.nodes {
		c.labelNode(t, n, "svcnet")
		g.Eventually(agents[n.Name].count("taking its rules over")).WithTimeout(converge).WithPolling(poll).Should(Equal(1))
		kubeProxies[n.Name].stop()
		g.Eventually(func() string { return kubeProxyRules(c, n, mode) }).WithTimeout(converge).WithPolling(poll).Should(BeEmpty(),
			"kube-proxy's rules left on %s", n.Name)
		expectServing(g, load, "svcnet on "+n.Name)
	}

	// And back: kube-controller-manager's controllers, then the nodes.
	c.startKubeControllerManager(t, kubeconfig) // runs until cleanup
	expectServing(g, load, "both controllers again")
	stopManager()
	c.addPods(t, ns, "web", c.nodes[1], 1)
	reaches(4)
	for _, n := range c.nodes {
		c.labelNode(t, n, agent.NodeProxyKubeProxy)
		g.Eventually(agents[n.Name].count("standing by")).WithTimeout(converge).WithPolling(poll).Should(Equal(2))
		kubeProxies[n.Name] = c.startKubeProxy(t, n, kubeconfig, mode)
		if mode == agent.ModeNFTables {
			g.Eventually(func() (string, error) { return c.lab.Run(n.NetNS, "nft", "list", "tables") }).
				WithTimeout(converge).WithPolling(poll).ShouldNot(ContainSubstring("table ip "+nftables.TableName+"\n"), "svcnet's table on %s", n.Name)
		} else {
			g.Eventually(kubeProxies[n.Name].count("SyncProxyRules complete")).WithTimeout(converge).WithPolling(poll).Should(BeNumerically(">", 0))
		}
		agents[n.Name].stop()
		expectServing(g, load, "kube-proxy again on "+n.Name)
	}

	expectNoFailure(t, g, load.Stop())
}
