// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
)

// holdFinalizer keeps a deleted Pod terminating until the test lets it go.
const holdFinalizer = "svcnet.io/kernel-test-hold"

// TestNodeAgentAsKubeProxy proves, with real packets, what an operator
// and a load balancer observe of a node's proxy beyond forwarding: the
// health check node port through a rollout, UDP flows across a target
// port change and a termination, and (iptables mode) rules flushed behind
// the agent's back and localhost NodePorts.
func TestNodeAgentAsKubeProxy(t *testing.T) {
	requireKernel(t)
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) { testNodeAgent(t, mode) })
	}
}

func testNodeAgent(t *testing.T, mode string) {
	c := newCluster(t, mode, "svcnet-kn", 2, endpointslice.ControllerName, controllers.EndpointSliceMirroringName)
	for _, n := range c.nodes {
		c.startAgent(t, n)
	}
	ctx := context.Background()
	newNS := func(t *testing.T) string {
		t.Cleanup(func() {
			if t.Failed() {
				for _, n := range c.nodes {
					t.Logf("%s rules on %s:\n%s", c.mode, n.Name, c.rules(n))
				}
			}
		})
		ns, err := c.env.Namespace(ctx, t.Name())
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}

	t.Run("the health check node port drains the node while its Pods terminate", func(t *testing.T) {
		testHealthCheckRollout(t, c, newNS(t))
	})
	t.Run("a UDP flow to a node port follows a target port change on the same Pod", func(t *testing.T) {
		testUDPTargetPortChange(t, c, newNS(t))
	})
	t.Run("a UDP flow stays with a terminating Pod while it serves", func(t *testing.T) {
		testUDPTerminatingKept(t, c, newNS(t))
	})
	if mode != agent.ModeIPTables {
		return
	}
	t.Run("flushed iptables rules come back within seconds", func(t *testing.T) {
		testFlushedRulesComeBack(t, c, newNS(t))
	})
	t.Run("a NodePort answers on 127.0.0.1, with route_localnet set in the node alone", func(t *testing.T) {
		testLocalhostNodePort(t, c, newNS(t))
	})
}

// startAgentWith runs an agent for node n with options changed by
// mutate; the channel gets what agent.Run returned.
func (c *cluster) startAgentWith(t *testing.T, n *netlab.Node, mutate func(*agent.Options)) <-chan error {
	t.Helper()
	opts := agent.DefaultOptions()
	opts.Mode = c.mode
	opts.NodeName = n.Name
	opts.NetNS = netlab.Path(n.NetNS)
	opts.ClusterCIDRs = []string{"10.244.0.0/16"}
	opts.HealthzBindAddress = "0"
	opts.MetricsBindAddress = "0"
	// A network namespace's nf_conntrack_max is read-only: the agent
	// would refuse to start, as kube-proxy does (--conntrack-max-per-core=0).
	opts.Conntrack.MaxPerCore = 0
	mutate(&opts)
	cfg, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.OpenFile(filepath.Join(c.logDir, n.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(2)))
	ctx, cancel := context.WithCancel(context.Background())
	result, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		defer logFile.Close()
		result <- agent.Run(ctx, c.env.Config, cfg, log)
	}()
	c.mu.Lock()
	c.agents[n.Name] = func() { cancel(); <-done }
	c.mu.Unlock()
	return result
}

// terminate deletes a Pod that holdFinalizer keeps, so that it stays
// terminating (and, still Ready, serving) until release.
func (c *cluster) terminate(t *testing.T, ns, name string) (release func()) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: name}
	var pod corev1.Pod
	if err := c.env.Client.Get(ctx, key, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Finalizers = append(pod.Finalizers, holdFinalizer)
	if err := c.env.Client.Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	if err := c.env.Client.Delete(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	release = func() {
		var p corev1.Pod
		if err := c.env.Client.Get(ctx, key, &p); err != nil {
			return
		}
		p.Finalizers = nil
		if err := c.env.Client.Update(ctx, &p); err != nil {
			return
		}
		// No kubelet confirms the end of the grace period: end it now.
		_ = c.env.Client.Delete(ctx, &p, client.GracePeriodSeconds(0))
	}
	t.Cleanup(release)
	return release
}

// serviceHealth is what a health check node port answers.
type serviceHealth struct {
	code                int
	weight              string
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func getServiceHealth(hc *http.Client, url string) (serviceHealth, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return serviceHealth{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return serviceHealth{}, err
	}
	h := serviceHealth{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight")}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, fmt.Errorf("%w: %s", err, body)
	}
	return h, nil
}

// testHealthCheckRollout rolls a two-port externalTrafficPolicy: Local
// LoadBalancer Service over on node1: two ready Pods count 2 (not 2 x 2
// ports); once both terminate the port answers 503 although they still
// get the node's traffic; a replacement makes it 200 again.
func testHealthCheckRollout(t *testing.T, c *cluster, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	old := c.addPods(t, ns, "roll", c.nodes[0], 2)
	svc := webService(ns, "roll")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 81, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP})
	svc = c.service(t, svc)
	outside := netlab.Client(c.client, 2*time.Second)
	healthURL := fmt.Sprintf("http://%s:%d/", c.nodes[0].IP, svc.Spec.HealthCheckNodePort)
	health := func() (serviceHealth, error) { return getServiceHealth(outside, healthURL) }
	g.Eventually(health).WithTimeout(converge).WithPolling(poll).Should(
		Equal(serviceHealth{code: http.StatusOK, weight: "2", LocalEndpoints: 2, ServiceProxyHealthy: true}))

	for _, p := range old {
		c.terminate(t, ns, p.Name)
	}
	g.Eventually(health).WithTimeout(converge).WithPolling(poll).Should(
		Equal(serviceHealth{code: http.StatusServiceUnavailable, weight: "0", LocalEndpoints: 0, ServiceProxyHealthy: true}))
	// The terminating Pods still serve the node's traffic meanwhile.
	nodePort := fmt.Sprintf("http://%s:%d/", c.nodes[0].IP, svc.Spec.Ports[0].NodePort)
	body, err := netlab.Get(ctx, outside, nodePort)
	g.Expect(err).NotTo(HaveOccurred(), "the NodePort while the node's Pods terminate")
	g.Expect(body).To(Or(HavePrefix(old[0].Name+" "), HavePrefix(old[1].Name+" ")))

	fresh := c.addPods(t, ns, "roll", c.nodes[0], 1)[0]
	g.Eventually(health).WithTimeout(converge).WithPolling(poll).Should(
		Equal(serviceHealth{code: http.StatusOK, weight: "1", LocalEndpoints: 1, ServiceProxyHealthy: true}))
	g.Eventually(func() (string, error) { return netlab.Get(ctx, outside, nodePort) }).
		WithTimeout(converge).WithPolling(poll).Should(HavePrefix(fresh.Name + " "))
}

// addTwoPortUDPPod creates a Pod on node n that answers UDP on udpPort
// with "<name>@<port>" and on udpPort+1 likewise.
func (c *cluster) addTwoPortUDPPod(t *testing.T, ns, app string, n *netlab.Node) *netlab.Pod {
	t.Helper()
	p, err := n.AddPod(c.nextName("u"), podPort)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{udpPort, udpPort + 1} {
		answer := []byte(fmt.Sprintf("%s@%d", p.Name, port))
		if err := p.ServeUDP(port, func(net.Addr) []byte { return answer }); err != nil {
			t.Fatal(err)
		}
	}
	pod := builder.Pod(p.Name, ns).Label("app", app).Node(n.Name).IP(p.IP.String()).Ready().Obj()
	if err := c.env.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return p
}

// testUDPTargetPortChange is upstream's conntrack e2e test: a client on
// node2 sends from one source port to node1's NodePort; the Service's
// targetPort moves to the Pod's other port, and the flow must follow.
func testUDPTargetPortChange(t *testing.T, c *cluster, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	server := c.addTwoPortUDPPod(t, ns, "udp-np", c.nodes[0])
	svc := builder.Service("udp-np", ns).PortProto("udp", 80, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "udp-np").Obj()
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = c.service(t, svc)
	g.Eventually(func() bool { return c.hasEndpoint(c.nodes[0], server.IP, udpPort) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
	clientPod, err := c.nodes[1].AddPod(c.nextName("c"), podPort)
	g.Expect(err).NotTo(HaveOccurred())
	conn := udpClient(t, clientPod, fmt.Sprintf("%s:%d", c.nodes[0].IP, svc.Spec.Ports[0].NodePort))
	g.Eventually(conn.ask).WithTimeout(converge).WithPolling(poll).Should(Equal(fmt.Sprintf("%s@%d", server.Name, udpPort)))

	g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(udpPort + 1)
	g.Expect(c.env.Client.Update(ctx, svc)).To(Succeed())
	// The client keeps sending every 50ms: without the cleanup, its flow
	// would never expire and would stay on the old port.
	g.Eventually(conn.ask).WithTimeout(converge).WithPolling(poll).Should(Equal(fmt.Sprintf("%s@%d", server.Name, udpPort+1)))
}

// testUDPTerminatingKept: a flow to a Pod that terminates but still
// serves stays with it (as a TCP connection would), though new flows go
// to the ready Pod; once the Pod is gone, the flow moves.
func testUDPTerminatingKept(t *testing.T, c *cluster, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	first := c.addUDPPod(t, ns, "udp-term", c.nodes[0])
	svc := c.service(t, builder.Service("udp-term", ns).PortProto("dns", 53, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "udp-term").Obj())
	g.Eventually(func() bool { return c.hasEndpoint(c.nodes[0], first.IP, udpPort) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
	clientPod, err := c.nodes[0].AddPod(c.nextName("c"), podPort)
	g.Expect(err).NotTo(HaveOccurred())
	conn := udpClient(t, clientPod, svc.Spec.ClusterIP+":53")
	g.Eventually(conn.ask).WithTimeout(converge).WithPolling(poll).Should(Equal(first.Name))

	second := c.addUDPPod(t, ns, "udp-term", c.nodes[1])
	g.Eventually(func() bool { return c.hasEndpoint(c.nodes[0], second.IP, udpPort) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
	release := c.terminate(t, ns, first.Name)
	// Once the rules send new flows to the ready Pod alone...
	g.Eventually(func() bool { return c.hasEndpoint(c.nodes[0], first.IP, udpPort) }).WithTimeout(converge).WithPolling(poll).Should(BeFalse())
	// ...the existing flow still reaches the terminating one.
	g.Consistently(conn.ask).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(first.Name))

	release()
	g.Eventually(func() error {
		return c.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Name}, &corev1.Pod{})
	}).WithTimeout(converge).WithPolling(poll).Should(MatchError(ContainSubstring("not found")))
	g.Eventually(conn.ask).WithTimeout(converge).WithPolling(poll).Should(Equal(second.Name))
}

// testFlushedRulesComeBack empties node1's nat table, as a firewalld
// reload does (`iptables -t nat -F` and `-X`), and expects traffic back
// within seconds, long before the hourly full resync; partial syncs
// would never rewrite the chains they believe are in place.
func testFlushedRulesComeBack(t *testing.T, c *cluster, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	node := c.nodes[0]
	c.stopAgent(node.Name)
	c.startAgentWith(t, node, func(o *agent.Options) { o.SyncPeriod = time.Second })
	t.Cleanup(func() {
		c.stopAgent(node.Name)
		c.startAgent(t, node)
	})
	c.addPods(t, ns, "flush", c.nodes[1], 1)
	svc := c.service(t, webService(ns, "flush"))
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	hc := netlab.Client(node.NetNS, time.Second)
	g.Eventually(func() (string, error) { return netlab.Get(ctx, hc, url) }).WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"))

	for _, flush := range [][]string{{"iptables-nft", "-t", "nat", "-F"}, {"iptables-nft", "-t", "nat", "-X"}} {
		_, err := c.lab.Run(node.NetNS, flush...)
		g.Expect(err).NotTo(HaveOccurred())
	}
	start := time.Now()
	g.Eventually(func() (string, error) { return netlab.Get(ctx, hc, url) }).WithTimeout(10 * time.Second).WithPolling(poll).Should(HavePrefix("p"))
	t.Logf("traffic back %s after the nat table was flushed", time.Since(start).Round(10*time.Millisecond))
	g.Expect(c.rules(node)).To(ContainSubstring(":KUBE-PROXY-CANARY"))
}

// testLocalhostNodePort reaches a NodePort on 127.0.0.1 from node1, as
// kube-proxy's default allows, and checks that route_localnet was set in
// node1's namespace and nowhere else.
func testLocalhostNodePort(t *testing.T, c *cluster, ns string) {
	g := NewWithT(t)
	ctx := context.Background()
	c.addPods(t, ns, "lo", c.nodes[1], 1)
	svc := webService(ns, "lo")
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = c.service(t, svc)
	hc := netlab.Client(c.nodes[0].NetNS, 2*time.Second)
	g.Eventually(func() (string, error) {
		return netlab.Get(ctx, hc, fmt.Sprintf("http://127.0.0.1:%d/", svc.Spec.Ports[0].NodePort))
	}).WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"))
	routeLocalnet := func(nsPath string) string {
		var v []byte
		g.Expect(netns.Do(nsPath, func() error {
			var err error
			v, err = os.ReadFile("/proc/sys/net/ipv4/conf/all/route_localnet")
			return err
		})).To(Succeed())
		return strings.TrimSpace(string(v))
	}
	g.Expect(routeLocalnet(netlab.Path(c.nodes[0].NetNS))).To(Equal("1"))
	g.Expect(routeLocalnet(netlab.Path(c.client))).To(Equal("0"), "the client's namespace is not a node")
	g.Expect(routeLocalnet("")).To(Equal("0"), "the test's own namespace is not a node")
	g.Expect(c.rules(c.nodes[0])).To(ContainSubstring("-A KUBE-FIREWALL"))
}

// TestHealthzFollowsTheNode checks /healthz and /livez on a node the
// cluster autoscaler is about to remove, with the agent still running.
func TestHealthzFollowsTheNode(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, agent.ModeNFTables, "svcnet-kh", 1, endpointslice.ControllerName)
	n := c.nodes[0]
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	result := c.startAgentWith(t, n, func(o *agent.Options) { o.HealthzBindAddress = addr })
	hc := &http.Client{Timeout: 2 * time.Second}
	status := func(path string) (int, error) {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	healthz := func() (int, error) { return status("/healthz") }
	livez := func() (int, error) { return status("/livez") }
	g.Eventually(healthz).WithTimeout(converge).WithPolling(poll).Should(Equal(http.StatusOK))

	var node corev1.Node
	g.Expect(c.env.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node)).To(Succeed())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: agent.TaintToBeDeleted, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	g.Expect(c.env.Client.Update(ctx, &node)).To(Succeed())
	g.Eventually(healthz).WithTimeout(converge).WithPolling(poll).Should(Equal(http.StatusServiceUnavailable))
	g.Expect(livez()).To(Equal(http.StatusOK), "/livez reports staleness alone")

	select {
	case err := <-result:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
}
