// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	// converge bounds the wait for rules to follow an API change.
	converge = 30 * time.Second
	poll     = 50 * time.Millisecond
	podPort  = 8080
	udpPort  = 5353
	clientIP = "192.168.50.100"
)

var (
	serviceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	// lbPool is the LoadBalancerIPPool's range, routed by the client to
	// node1.
	lbPool = netip.MustParsePrefix("192.168.77.0/28")
)

// cluster is the shared fixture: API server, controllers, two nodes with
// agents, and a client outside the nodes.
type cluster struct {
	// mode is the dataplane mode the agents start in.
	mode   string
	env    *testenv.Env
	lab    *netlab.Lab
	nodes  []*netlab.Node
	client string

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	pods   int
	logDir string
}

func startCluster(t *testing.T, mode string) *cluster {
	t.Helper()
	c := newCluster(t, mode, "svcnet-kt", 2, endpointslice.ControllerName, controllers.EndpointSliceMirroringName, controllers.LoadBalancerName)
	mustRun(t, c.lab, c.client, "ip", "route", "add", lbPool.String(), "via", c.nodes[0].IP.String())
	for _, n := range c.nodes {
		c.startAgent(t, n)
	}
	return c
}

// newCluster starts an API server with the manager's controllers ctrls,
// a lab (named labPrefix and a number) of nodes routed to each other with
// their Node objects, and a client on their segment. The agents are the
// caller's to start; they are stopped before the lab goes.
func newCluster(t *testing.T, mode, labPrefix string, nodes int, ctrls ...string) *cluster {
	t.Helper()
	c := newBareCluster(t, mode, labPrefix, nodes)
	c.startManager(t, ctrls...)
	return c
}

// startManager starts svcnet's manager with the controllers ctrls; it is
// stopped by the function returned, or at cleanup.
func (c *cluster) startManager(t *testing.T, ctrls ...string) (stop func()) {
	t.Helper()
	stopMgr, err := c.env.StartManager(controllers.Options{Controllers: ctrls, EndpointSlice: endpointslice.DefaultOptions()})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(stopMgr) }
	t.Cleanup(stop)
	return stop
}

// newBareCluster is newCluster without svcnet's manager: an API server
// alone, the lab, its nodes and client.
func newBareCluster(t *testing.T, mode, labPrefix string, nodes int) *cluster {
	t.Helper()
	g := NewWithT(t)
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: serviceCIDR.String()})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	lab, err := netlab.New(fmt.Sprintf("%s%04d", labPrefix, rand.IntN(10000)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(lab.Close)
	c := &cluster{mode: mode, env: env, lab: lab, agents: map[string]context.CancelFunc{}, logDir: t.TempDir()}
	for i := 1; i <= nodes; i++ {
		n, err := lab.AddNode(fmt.Sprintf("node%d", i), netip.MustParsePrefix(fmt.Sprintf("192.168.50.%d/24", 10+i)),
			netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)), serviceCIDR)
		g.Expect(err).NotTo(HaveOccurred())
		c.nodes = append(c.nodes, n)
		c.createNode(t, n)
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				g.Expect(a.Route(b)).To(Succeed())
			}
		}
	}
	c.client, err = lab.AddClient("client", netip.MustParsePrefix(clientIP+"/24"))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cancel := range c.agents {
			cancel()
		}
	})
	return c
}

// createNode registers n's Node with a zone of its own and its
// InternalIP, as a kubelet does.
func (c *cluster) createNode(t *testing.T, n *netlab.Node) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelTopologyZone: "zone-" + n.Name}}}
	if err := c.env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}}
	if err := c.env.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// startAgent runs an agent for node n in this process, programming n's
// network namespace in the cluster's mode.
func (c *cluster) startAgent(t *testing.T, n *netlab.Node) {
	t.Helper()
	c.startAgentMode(t, n, c.mode)
}

func (c *cluster) startAgentMode(t *testing.T, n *netlab.Node, mode string) {
	t.Helper()
	opts := agent.DefaultOptions()
	opts.Mode = mode
	opts.Conntrack.MaxPerCore = 0 // nf_conntrack_max is the host's
	opts.NodeName = n.Name
	opts.NetNS = netlab.Path(n.NetNS)
	opts.ClusterCIDRs = []string{"10.244.0.0/16"}
	opts.HealthzBindAddress = "0"
	opts.MetricsBindAddress = "0"
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer logFile.Close()
		if err := agent.Run(ctx, c.env.Config, cfg, log); err != nil {
			fmt.Fprintf(os.Stderr, "agent %s: %v\n", n.Name, err)
		}
	}()
	c.mu.Lock()
	c.agents[n.Name] = func() { cancel(); <-done }
	c.mu.Unlock()
}

func (c *cluster) stopAgent(name string) {
	c.mu.Lock()
	cancel := c.agents[name]
	delete(c.agents, name)
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// addPods creates count Pods labelled app on node n: a network namespace
// with an HTTP server, and the Pod object, Running and Ready.
func (c *cluster) addPods(t *testing.T, ns, app string, n *netlab.Node, count int) []*netlab.Pod {
	t.Helper()
	var out []*netlab.Pod
	for range count {
		name := c.nextName("p")
		p, err := n.AddPod(name, podPort)
		if err != nil {
			t.Fatal(err)
		}
		pod := builder.Pod(name, ns).Label("app", app).ContainerPort("http", podPort).Node(n.Name).IP(p.IP.String()).Ready().Obj()
		if err := c.env.CreatePod(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// addUDPPod creates a Pod labelled app on node n that answers UDP on
// udpPort with its name.
func (c *cluster) addUDPPod(t *testing.T, ns, app string, n *netlab.Node) *netlab.Pod {
	t.Helper()
	p, err := n.AddPod(c.nextName("u"), podPort)
	if err != nil {
		t.Fatal(err)
	}
	name := []byte(p.Name)
	if err := p.ServeUDP(udpPort, func(net.Addr) []byte { return name }); err != nil {
		t.Fatal(err)
	}
	pod := builder.Pod(p.Name, ns).Label("app", app).Node(n.Name).IP(p.IP.String()).Ready().Obj()
	if err := c.env.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return p
}

// nextName returns a Pod name unique in the lab (it names a namespace too).
func (c *cluster) nextName(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pods++
	return fmt.Sprintf("%s%d", prefix, c.pods)
}

func (c *cluster) service(t *testing.T, svc *corev1.Service) *corev1.Service {
	t.Helper()
	if err := c.env.Client.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

func webService(ns, app string) *corev1.Service {
	return builder.Service(app, ns).Port("http", 80, intstr.FromString("http")).Selector("app", app).Obj()
}

// fetchAll makes n requests and counts the answering Pods.
func fetchAll(ctx context.Context, hc *http.Client, url string, n int) (map[string]int, error) {
	counts := map[string]int{}
	for range n {
		body, err := netlab.Get(ctx, hc, url)
		if err != nil {
			return counts, err
		}
		counts[strings.Fields(body)[0]]++
	}
	return counts, nil
}

// TestAgent runs the suite in every dataplane mode.
func TestAgent(t *testing.T) {
	requireKernel(t)
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) { testAgent(t, mode) })
	}
}

// rules is what a node's dataplane holds in the cluster's mode, as an
// operator would list it.
func (c *cluster) rules(n *netlab.Node) string {
	var out string
	if c.mode == agent.ModeNFTables {
		out, _ = c.lab.Run(n.NetNS, "nft", "list", "table", "ip", nftables.TableName)
	} else {
		out, _ = c.lab.Run(n.NetNS, "iptables-save")
	}
	return out
}

// hasEndpoint tells whether a node's rules send traffic to ip:port.
func (c *cluster) hasEndpoint(n *netlab.Node, ip netip.Addr, port int) bool {
	rules := c.rules(n)
	return strings.Contains(rules, fmt.Sprintf("%s:%d", ip, port)) || strings.Contains(rules, fmt.Sprintf(": %s . %d", ip, port))
}

func testAgent(t *testing.T, mode string) {
	c := startCluster(t, mode)
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
	clientPodOn := func(t *testing.T, n *netlab.Node) *netlab.Pod {
		p, err := n.AddPod(c.nextName("c"), podPort)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("ClusterIP from a Pod and from the node, balanced over 3 endpoints", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		pods := c.addPods(t, ns, "web", c.nodes[0], 2)
		pods = append(pods, c.addPods(t, ns, "web", c.nodes[1], 1)...)
		svc := c.service(t, webService(ns, "web"))
		url := "http://" + svc.Spec.ClusterIP + ":80/"
		fromPod := netlab.Client(clientPodOn(t, c.nodes[0]).NetNS, 2*time.Second)
		g.Eventually(func() (map[string]int, error) {
			return fetchAll(ctx, fromPod, url, 30)
		}).WithTimeout(converge).WithPolling(poll).Should(HaveLen(3))

		counts, err := fetchAll(ctx, fromPod, url, 300)
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods {
			g.Expect(counts[p.Name]).To(And(BeNumerically(">=", 60), BeNumerically("<=", 141)),
				"Pod %s got %d of 300 requests: %v", p.Name, counts[p.Name], counts)
		}
		for _, n := range c.nodes {
			body, err := netlab.Get(ctx, netlab.Client(n.NetNS, 2*time.Second), url)
			g.Expect(err).NotTo(HaveOccurred(), "from node %s", n.Name)
			g.Expect(body).To(MatchRegexp(`^p\d+ `))
		}
	})

	t.Run("NodePort from an outside client on every node", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "np", c.nodes[0], 1)
		svc := webService(ns, "np")
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc = c.service(t, svc)
		nodePort := svc.Spec.Ports[0].NodePort
		g.Expect(nodePort).NotTo(BeZero())
		outside := netlab.Client(c.client, 2*time.Second)
		for _, n := range c.nodes {
			g.Eventually(func() (string, error) {
				return netlab.Get(ctx, outside, fmt.Sprintf("http://%s:%d/", n.IP, nodePort))
			}).WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"), "NodePort on %s", n.Name)
		}
	})

	t.Run("scaling from 3 to 10 endpoints reaches all 10", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "scale", c.nodes[0], 3)
		svc := c.service(t, webService(ns, "scale"))
		url := "http://" + svc.Spec.ClusterIP + ":80/"
		hc := netlab.Client(c.nodes[1].NetNS, 2*time.Second)
		g.Eventually(func() (map[string]int, error) { return fetchAll(ctx, hc, url, 30) }).
			WithTimeout(converge).WithPolling(poll).Should(HaveLen(3))
		c.addPods(t, ns, "scale", c.nodes[0], 4)
		c.addPods(t, ns, "scale", c.nodes[1], 3)
		seen := map[string]int{}
		g.Eventually(func() map[string]int {
			got, _ := fetchAll(ctx, hc, url, 50)
			for k, v := range got {
				seen[k] += v
			}
			return seen
		}).WithTimeout(converge).WithPolling(poll).Should(HaveLen(10))
	})

	t.Run("a Service without endpoints refuses connections at once", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		svc := c.service(t, webService(ns, "nobody"))
		hc := netlab.Client(c.nodes[0].NetNS, 5*time.Second)
		g.Eventually(func() error {
			_, err := netlab.Get(ctx, hc, "http://"+svc.Spec.ClusterIP+":80/")
			return err
		}).WithTimeout(converge).WithPolling(poll).Should(MatchError(ContainSubstring("connection refused")))
		start := time.Now()
		_, err := netlab.Get(ctx, hc, "http://"+svc.Spec.ClusterIP+":80/")
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
		g.Expect(time.Since(start)).To(BeNumerically("<", time.Second), "refusal took %s", time.Since(start))
	})

	t.Run("ClientIP session affinity sticks to one Pod", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "sticky", c.nodes[0], 3)
		svc := webService(ns, "sticky")
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc = c.service(t, svc)
		url := "http://" + svc.Spec.ClusterIP + ":80/"
		hc := netlab.Client(clientPodOn(t, c.nodes[1]).NetNS, 2*time.Second)
		g.Eventually(func() (map[string]int, error) { return fetchAll(ctx, hc, url, 1) }).
			WithTimeout(converge).WithPolling(poll).Should(HaveLen(1))
		counts, err := fetchAll(ctx, hc, url, 30)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(counts).To(HaveLen(1), "requests spread over %v", counts)
	})

	t.Run("externalTrafficPolicy Local keeps the source IP and reports local endpoints", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "local", c.nodes[0], 1)
		svc := webService(ns, "local")
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		svc = c.service(t, svc)
		g.Expect(svc.Spec.HealthCheckNodePort).NotTo(BeZero())
		outside := netlab.Client(c.client, 2*time.Second)
		g.Eventually(func() (string, error) {
			body, err := netlab.Get(ctx, outside, fmt.Sprintf("http://%s:%d/", c.nodes[0].IP, svc.Spec.Ports[0].NodePort))
			if f := strings.Fields(body); len(f) > 1 {
				return f[1], err
			}
			return body, err
		}).WithTimeout(converge).WithPolling(poll).Should(Equal(clientIP), "the Pod must see the client's own address")

		health := func(n *netlab.Node) (int, error) {
			resp, err := outside.Get(fmt.Sprintf("http://%s:%d/", n.IP, svc.Spec.HealthCheckNodePort))
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		g.Eventually(func() (int, error) { return health(c.nodes[0]) }).WithTimeout(converge).WithPolling(poll).Should(Equal(http.StatusOK))
		g.Eventually(func() (int, error) { return health(c.nodes[1]) }).WithTimeout(converge).WithPolling(poll).Should(Equal(http.StatusServiceUnavailable))
	})

	t.Run("a UDP flow moves to a new endpoint once its old one is removed", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		udpPod := func(n *netlab.Node) *netlab.Pod { return c.addUDPPod(t, ns, "dns", n) }
		old := udpPod(c.nodes[0])
		svc := c.service(t, builder.Service("dns", ns).PortProto("dns", 53, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "dns").Obj())
		// Datagrams sent before the rules exist would pin the flow to an
		// entry without DNAT: start it once the endpoint is programmed.
		g.Eventually(func() bool { return c.hasEndpoint(c.nodes[0], old.IP, udpPort) }).WithTimeout(converge).WithPolling(poll).Should(BeTrue())
		// One socket, one source port: every datagram is the same conntrack
		// flow, which keeps going to the endpoint it was first sent to
		// unless the agent deletes the entry.
		conn := udpClient(t, clientPodOn(t, c.nodes[0]), svc.Spec.ClusterIP+":53")
		g.Eventually(func() (string, error) { return conn.ask() }).WithTimeout(converge).WithPolling(poll).Should(Equal(old.Name))

		replacement := udpPod(c.nodes[1])
		// The old Pod object goes at once (no kubelet ends its grace
		// period: a terminating Pod that still serves keeps its flows, as
		// with kube-proxy); its server keeps answering, as a process that
		// has not exited yet would.
		g.Expect(c.env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: old.Name}},
			client.GracePeriodSeconds(0))).To(Succeed())
		g.Eventually(func() (string, error) { return conn.ask() }).WithTimeout(converge).WithPolling(poll).Should(Equal(replacement.Name))
	})

	t.Run("a Service without a selector reaches the addresses of its hand-written Endpoints", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		// A server the Service's selector cannot find: the Endpoints name it.
		outside := c.addPods(t, ns, "outside", c.nodes[1], 1)[0]
		svc := c.service(t, builder.Service("external", ns).Port("http", 80, intstr.FromInt32(podPort)).Obj())
		ep := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "external"},
			Subsets: []corev1.EndpointSubset{{
				Addresses: []corev1.EndpointAddress{{IP: outside.IP.String()}},
				Ports:     []corev1.EndpointPort{{Name: "http", Port: podPort}},
			}},
		}
		g.Expect(c.env.Client.Create(ctx, ep)).To(Succeed())
		fromPod := netlab.Client(clientPodOn(t, c.nodes[0]).NetNS, 2*time.Second)
		g.Eventually(func() (string, error) {
			return netlab.Get(ctx, fromPod, "http://"+svc.Spec.ClusterIP+":80/")
		}).WithTimeout(converge).WithPolling(poll).Should(HavePrefix(outside.Name + " "))
	})

	t.Run("a UDP flow that began while the node had no rules for it reaches an endpoint once they exist", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		client := clientPodOn(t, c.nodes[0])
		c.stopAgent(c.nodes[0].Name)
		server := c.addUDPPod(t, ns, "late", c.nodes[1])
		svc := c.service(t, builder.Service("late", ns).PortProto("dns", 53, intstr.FromInt32(udpPort), corev1.ProtocolUDP).Selector("app", "late").Obj())
		// node1's stopped agent has no rules for the new Service. As on a
		// node whose routes take the address somewhere (here: to itself),
		// these datagrams go unanswered and their flow is recorded without
		// DNAT; every later datagram would follow it.
		local := []string{"ip", "route", "add", "local", svc.Spec.ClusterIP + "/32", "dev", "lo", "table", "local"}
		_, err := c.lab.Run(c.nodes[0].NetNS, local...)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(func() {
			_, _ = c.lab.Run(c.nodes[0].NetNS, "ip", "route", "del", "local", svc.Spec.ClusterIP+"/32", "dev", "lo", "table", "local")
		})
		conn := udpClient(t, client, svc.Spec.ClusterIP+":53")
		for range 3 {
			_, err := conn.ask()
			g.Expect(err).To(HaveOccurred())
		}
		c.startAgent(t, c.nodes[0])
		g.Eventually(func() (string, error) { return conn.ask() }).WithTimeout(converge).WithPolling(poll).Should(Equal(server.Name))
	})

	t.Run("headless and ExternalName Services get no rules", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "hl", c.nodes[0], 1)
		headless := webService(ns, "hl")
		headless.Spec.ClusterIP = corev1.ClusterIPNone
		c.service(t, headless)
		c.service(t, builder.Service("ext", ns).ExternalName("example.com").Obj())
		// A normal Service created afterwards: once its rules are there, the
		// agent has seen the other two.
		marker := c.service(t, webService(ns, "marker"))
		c.addPods(t, ns, "marker", c.nodes[0], 1)
		g.Eventually(func() string { return c.rules(c.nodes[0]) }).WithTimeout(converge).WithPolling(poll).Should(ContainSubstring(marker.Spec.ClusterIP))
		out := c.rules(c.nodes[0])
		g.Expect(out).NotTo(ContainSubstring(ns + "/hl"))
		g.Expect(out).NotTo(ContainSubstring(ns + "/ext"))
	})

	t.Run("a LoadBalancer IP from a pool is served, and only to loadBalancerSourceRanges", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		pool := &svcnetv1alpha1.LoadBalancerIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: "kernel-" + ns},
			Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{lbPool.String()},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		}
		g.Expect(c.env.Client.Create(ctx, pool)).To(Succeed())
		t.Cleanup(func() { _ = c.env.Client.Delete(context.Background(), pool) })
		c.addPods(t, ns, "lb", c.nodes[1], 1)
		svc := webService(ns, "lb")
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc = c.service(t, svc)
		var ip string
		g.Eventually(func() ([]corev1.LoadBalancerIngress, error) {
			err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)
			return svc.Status.LoadBalancer.Ingress, err
		}).WithTimeout(converge).WithPolling(poll).Should(HaveLen(1))
		ip = svc.Status.LoadBalancer.Ingress[0].IP
		g.Expect(lbPool.Contains(netip.MustParseAddr(ip))).To(BeTrue(), "%s from pool %s", ip, lbPool)
		// The fabric routes the pool to node1, as a router announcing it
		// would; node1 forwards to the Pod on node2.
		outside := netlab.Client(c.client, time.Second)
		url := fmt.Sprintf("http://%s/", ip)
		g.Eventually(func() (string, error) { return netlab.Get(ctx, outside, url) }).
			WithTimeout(converge).WithPolling(poll).Should(MatchRegexp(`^p\d+ `))

		// A source range without the client shuts it out.
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.LoadBalancerSourceRanges = []string{"10.99.0.0/16"}
		g.Expect(c.env.Client.Update(ctx, svc)).To(Succeed())
		g.Eventually(func() error { _, err := netlab.Get(ctx, outside, url); return err }).
			WithTimeout(converge).WithPolling(poll).Should(HaveOccurred())
		g.Consistently(func() error { _, err := netlab.Get(ctx, outside, url); return err }).
			WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(HaveOccurred())

		// A source range with the client lets it in again.
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.LoadBalancerSourceRanges = []string{clientIP + "/32"}
		g.Expect(c.env.Client.Update(ctx, svc)).To(Succeed())
		g.Eventually(func() (string, error) { return netlab.Get(ctx, outside, url) }).
			WithTimeout(converge).WithPolling(poll).Should(MatchRegexp(`^p\d+ `))
	})

	t.Run("externalTrafficPolicy Local: a Pod on a node without an endpoint gets through, an outside client is dropped", func(t *testing.T) {
		testLocalPolicyThroughTheAPI(t, c, newNS, clientPodOn)
	})

	t.Run("an EndpointSlice labelled service.kubernetes.io/headless is ignored", func(t *testing.T) {
		testHeadlessLabelledSlice(t, c, newNS, clientPodOn)
	})

	if c.mode == agent.ModeIPTables { // once, from the iptables suite
		t.Run("switching a node iptables -> nftables -> iptables keeps serving and leaves no rules of the other mode", func(t *testing.T) {
			g := NewWithT(t)
			ns := newNS(t)
			c.addPods(t, ns, "switch", c.nodes[1], 2)
			svc := c.service(t, webService(ns, "switch"))
			url := "http://" + svc.Spec.ClusterIP + ":80/"
			hc := netlab.Client(clientPodOn(t, c.nodes[0]).NetNS, 2*time.Second)
			node := c.nodes[0]
			t.Cleanup(func() {
				c.stopAgent(node.Name)
				c.startAgent(t, node)
			})
			for _, step := range []struct{ mode, gone string }{
				{agent.ModeIPTables, ""},
				{agent.ModeNFTables, "KUBE-SVC-"},
				{agent.ModeIPTables, "table ip svcnet"},
			} {
				c.stopAgent(node.Name)
				c.startAgentMode(t, node, step.mode)
				g.Eventually(func() (map[string]int, error) { return fetchAll(ctx, hc, url, 20) }).
					WithTimeout(converge).WithPolling(poll).Should(HaveLen(2), "traffic in %s mode", step.mode)
				if step.gone == "" {
					continue
				}
				g.Eventually(func() string {
					ipt, _ := c.lab.Run(node.NetNS, "iptables-save")
					nft, _ := c.lab.Run(node.NetNS, "nft", "list", "ruleset")
					return ipt + nft
				}).WithTimeout(converge).WithPolling(poll).ShouldNot(ContainSubstring(step.gone), "rules of the other mode after moving to %s", step.mode)
				// Only this mode's rules are left: they alone serve.
				got, err := fetchAll(ctx, hc, url, 20)
				if err != nil {
					ipt, _ := c.lab.Run(node.NetNS, "iptables-save", "-t", "nat")
					nft, _ := c.lab.Run(node.NetNS, "nft", "list", "ruleset")
					t.Fatalf("in %s mode: %v\n%s\n%s", step.mode, err, ipt, nft)
				}
				g.Expect(got).To(HaveLen(2), "traffic in %s mode alone", step.mode)
			}
		})
	}

	t.Run("restarting the agent drops no request", func(t *testing.T) {
		g := NewWithT(t)
		ns := newNS(t)
		c.addPods(t, ns, "steady", c.nodes[0], 2)
		svc := c.service(t, webService(ns, "steady"))
		url := "http://" + svc.Spec.ClusterIP + ":80/"
		hc := netlab.Client(clientPodOn(t, c.nodes[0]).NetNS, 2*time.Second)
		g.Eventually(func() (map[string]int, error) { return fetchAll(ctx, hc, url, 10) }).
			WithTimeout(converge).WithPolling(poll).Should(HaveLen(2))

		stop := make(chan struct{})
		type result struct{ ok, failed int }
		done := make(chan result)
		go func() {
			var r result
			for {
				select {
				case <-stop:
					done <- r
					return
				default:
				}
				if _, err := netlab.Get(ctx, hc, url); err != nil {
					r.failed++
				} else {
					r.ok++
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond) // traffic before the restart
		c.stopAgent(c.nodes[0].Name)
		c.startAgent(t, c.nodes[0])
		// Traffic while the new agent starts and makes its first full sync.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		close(stop)
		r := <-done
		g.Expect(r.failed).To(BeZero(), "%d of %d requests failed across the agent restart", r.failed, r.ok+r.failed)
		g.Expect(r.ok).To(BeNumerically(">", 50))
	})
}

// udpConn is a connected UDP socket inside a Pod's namespace.
type udpConn struct{ c *net.UDPConn }

func udpClient(t *testing.T, from *netlab.Pod, addr string) *udpConn {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var c *net.UDPConn
	if err := netns.Do(netlab.Path(from.NetNS), func() error {
		c, err = net.DialUDP("udp", nil, raddr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &udpConn{c: c}
}

// ask sends one datagram and returns the answer.
func (u *udpConn) ask() (string, error) {
	if _, err := u.c.Write([]byte("who")); err != nil {
		return "", err
	}
	if err := u.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	n, err := u.c.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
