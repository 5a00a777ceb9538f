// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/privatens"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// privateNS is where the whole test binary runs: its own network and
// mount namespaces.
var privateNS *privatens.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("SVCNET_TEST_LOG") != "" {
		ctrl.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2))))
	}
	privateNS = privatens.Enter()
	privateNS.Report("node simulator tests")
	os.Exit(m.Run())
}

func TestPodCIDR(t *testing.T) {
	for _, tc := range []struct {
		cluster string
		i       int
		want    string
	}{
		{"10.244.0.0/16", 1, "10.244.1.0/24"},
		{"10.244.0.0/16", 255, "10.244.255.0/24"},
		{"10.0.0.0/8", 300, "10.1.44.0/24"},
		{"fd00:10:244::/56", 3, "fd00:10:244:3::/64"},
	} {
		got, err := PodCIDR(netip.MustParsePrefix(tc.cluster), tc.i)
		if err != nil || got.String() != tc.want {
			t.Errorf("PodCIDR(%s, %d) = %s, %v; want %s", tc.cluster, tc.i, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cluster string
		i       int
	}{{"10.244.0.0/16", 256}, {"10.244.0.0/24", 1}, {"10.244.0.0/16", -1}} {
		if got, err := PodCIDR(netip.MustParsePrefix(tc.cluster), tc.i); err == nil {
			t.Errorf("PodCIDR(%s, %d) = %s, want an error", tc.cluster, tc.i, got)
		}
	}
}

func TestServedPorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{
			{Name: "sidecar", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 9090}}},
			{Name: "setup", Ports: []corev1.ContainerPort{{ContainerPort: 7070}}},
		},
		Containers: []corev1.Container{
			{Name: "web", Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{InitialDelaySeconds: 2},
				Lifecycle:      &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "sleep 5"}}}}},
			{Name: "other", Ports: []corev1.ContainerPort{{ContainerPort: 132, Protocol: corev1.ProtocolSCTP}},
				ReadinessProbe: &corev1.Probe{InitialDelaySeconds: 4},
				Lifecycle:      &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3}}}},
		},
	}}
	var got []string
	for _, p := range servedPorts(pod, nil) {
		got = append(got, fmt.Sprintf("%s/%d", p.Protocol, p.ContainerPort))
	}
	if strings.Join(got, " ") != "TCP/9090 TCP/8080 UDP/53" {
		t.Errorf("servedPorts = %v, want the sidecar's and the containers' TCP and UDP ports, once each", got)
	}
	if p := servedPorts(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, nil); len(p) != 1 || p[0].ContainerPort != DefaultPort {
		t.Errorf("a Pod without ports serves %v, want port %d", p, DefaultPort)
	}
}

// podReady reports the Pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runSimulator runs the node simulator with opts in a manager of its own
// until the test ends.
func runSimulator(t *testing.T, env *testenv.Env, opts Options) manager.Manager {
	t.Helper()
	g := NewWithT(t)
	// Tests run a simulator each in this process: its controller's name
	// comes back.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	if opts.PodsDir == "" {
		opts.PodsDir = t.TempDir()
	}
	if opts.LogDir == "" {
		opts.LogDir = t.TempDir()
	}
	g.Expect(Add(mgr, opts)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node simulator: %v", err)
		}
	})
	return mgr
}

// startEnvAndLab starts a real API server and a network lab whose
// namespaces start with svcnet-<tag> and a random number, both stopped
// when t ends; prefix is that start.
func startEnvAndLab(t *testing.T, tag string) (env *testenv.Env, lab *netlab.Lab, prefix string) {
	t.Helper()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	prefix = fmt.Sprintf("svcnet-%s%04d", tag, rand.IntN(10000))
	if lab, err = netlab.New(prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lab.Close)
	return env, lab, prefix
}

// TestSimulator runs the simulator against a real API server and real
// namespaces: registration, scheduling, addresses (dual-stack nodes, so
// both families), servers, readiness delay, graceful deletion,
// nodeSelector.
func TestSimulator(t *testing.T) {
	privateNS.Require(t)
	g := NewWithT(t)
	ctx := context.Background()
	env, lab, prefix := startEnvAndLab(t, "st")
	var nodes []Node
	for i := 1; i <= 2; i++ {
		n, err := lab.AddNode(fmt.Sprintf("node-%d", i), netip.MustParsePrefix(fmt.Sprintf("172.31.0.%d/24", 10+i)), netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", i)))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.AddFamily(netip.MustParsePrefix(fmt.Sprintf("fd00:31::%d/64", 10+i)), netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%d::/64", i)))).To(Succeed())
		nodes = append(nodes, Node{Name: n.Name, Zone: fmt.Sprintf("zone-%d", i), Net: n})
	}
	g.Expect(nodes[0].Net.Route(nodes[1].Net)).To(Succeed())
	g.Expect(nodes[1].Net.Route(nodes[0].Net)).To(Succeed())
	// A simulated Node from an earlier run with more nodes goes away.
	stale := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-9", Labels: map[string]string{LabelSimulated: "true"}}}
	g.Expect(env.Client.Create(ctx, stale)).To(Succeed())

	mgr := runSimulator(t, env, Options{Nodes: nodes})

	ns, err := env.Namespace(ctx, "sim")
	g.Expect(err).NotTo(HaveOccurred())

	t.Run("nodes are registered with CIDR, zone, address, Ready and a Lease", func(t *testing.T) {
		g := NewWithT(t)
		for _, n := range nodes {
			var node corev1.Node
			g.Eventually(func() ([]corev1.NodeAddress, error) {
				err := env.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node)
				return node.Status.Addresses, err
			}).ShouldNot(BeEmpty(), "the status is written right after the create")
			g.Expect(node.Spec.PodCIDR).To(Equal(n.Net.PodCIDR.String()))
			g.Expect(node.Spec.PodCIDRs).To(Equal([]string{n.Net.PodCIDRs[0].String(), n.Net.PodCIDRs[1].String()}))
			g.Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, n.Zone))
			g.Expect(node.Status.Addresses).To(ContainElements(
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.Net.IPs[0].String()},
				corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: n.Net.IPs[1].String()}))
			g.Expect(node.Status.Conditions).To(ContainElement(HaveField("Type", corev1.NodeReady)))
			var lease coordinationv1.Lease
			g.Eventually(func() error {
				return env.Client.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: n.Name}, &lease)
			}).Should(Succeed())
			g.Expect(*lease.Spec.HolderIdentity).To(Equal(n.Name))
		}
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(stale), &corev1.Node{}))
		}).Should(BeTrue(), "the stale simulated Node is deleted")
	})

	running := func(g Gomega, name string) *corev1.Pod {
		var pod corev1.Pod
		g.Eventually(func() corev1.PodPhase {
			_ = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pod)
			return pod.Status.Phase
		}).WithTimeout(10 * time.Second).Should(Equal(corev1.PodRunning))
		return &pod
	}
	getAt := func(ip string, port int) (string, error) {
		body, err := netlab.Get(ctx, netlab.Client(nodes[0].Net.NetNS, time.Second), "http://"+net.JoinHostPort(ip, strconv.Itoa(port))+"/")
		return strings.TrimSpace(body), err
	}
	get := func(p *corev1.Pod, port int) (string, error) { return getAt(p.Status.PodIP, port) }

	t.Run("pods are spread, addressed from their node's CIDR and served on every port", func(t *testing.T) {
		g := NewWithT(t)
		perNode := map[string]int{}
		for i := range 4 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", i)}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "nginx", Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}}},
			}}
			g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		}
		for i := range 4 {
			p := running(g, fmt.Sprintf("web-%d", i))
			perNode[p.Spec.NodeName]++
			var n Node
			for _, x := range nodes {
				if x.Name == p.Spec.NodeName {
					n = x
				}
			}
			g.Expect(n.Net.PodCIDR.Contains(netip.MustParseAddr(p.Status.PodIP))).To(BeTrue(), "%s has %s, outside %s", p.Name, p.Status.PodIP, n.Net.PodCIDR)
			g.Expect(p.Status.HostIP).To(Equal(n.Net.IP.String()))
			g.Expect(p.Status.HostIPs).To(Equal([]corev1.HostIP{{IP: n.Net.IPs[0].String()}, {IP: n.Net.IPs[1].String()}}))
			g.Expect(p.Status.PodIPs).To(HaveLen(2))
			g.Expect(p.Status.PodIPs[0].IP).To(Equal(p.Status.PodIP))
			v6 := p.Status.PodIPs[1].IP
			g.Expect(n.Net.PodCIDRs[1].Contains(netip.MustParseAddr(v6))).To(BeTrue(), "%s has %s, outside %s", p.Name, v6, n.Net.PodCIDRs[1])
			g.Expect(podReady(p)).To(BeTrue())
			g.Eventually(func() (string, error) { return get(p, 8080) }).Should(Equal(p.Name))
			g.Eventually(func() (string, error) { return getAt(v6, 8080) }).Should(Equal(p.Name), "over IPv6")
			// UDP: one datagram, the Pod's name back.
			var answer string
			g.Expect(netns.Do(netlab.Path(nodes[0].Net.NetNS), func() error {
				conn, err := net.Dial("udp", net.JoinHostPort(p.Status.PodIP, "5353"))
				if err != nil {
					return err
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Write([]byte("who")); err != nil {
					return err
				}
				buf := make([]byte, 256)
				n, err := conn.Read(buf)
				answer = strings.TrimSpace(string(buf[:n]))
				return err
			})).To(Succeed())
			g.Expect(answer).To(Equal(p.Name))
		}
		g.Expect(perNode).To(Equal(map[string]int{"node-1": 2, "node-2": 2}))
	})

	t.Run("readiness waits for the probe's initial delay", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "nginx", ReadinessProbe: &corev1.Probe{
				InitialDelaySeconds: 2, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(DefaultPort)}},
			}}},
		}}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		p := running(g, "slow")
		g.Expect(podReady(p)).To(BeFalse(), "Ready before the initial delay")
		g.Expect(get(p, DefaultPort)).To(Equal("slow"), "the server runs before the Pod is Ready")
		g.Eventually(func() bool {
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)
			return podReady(p)
		}).WithTimeout(5 * time.Second).Should(BeTrue())
	})

	t.Run("a deleted Pod serves through its preStop sleep, then goes with its namespace", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "draining"}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To(int64(30)),
			Containers: []corev1.Container{{Name: "web", Image: "nginx",
				Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 2}}}}},
		}}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		p := running(g, "draining")
		nsName := prefix + "-" + podRole(p)
		g.Expect(netlab.Path(nsName)).To(BeAnExistingFile())
		start := time.Now()
		g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
		g.Consistently(func() (string, error) { return get(p, DefaultPort) }).WithTimeout(time.Second).Should(Equal("draining"))
		g.Eventually(func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
		}).WithTimeout(10 * time.Second).Should(BeTrue())
		g.Expect(time.Since(start)).To(BeNumerically(">=", 2*time.Second), "deleted before the preStop sleep ended")
		g.Expect(netlab.Path(nsName)).NotTo(BeAnExistingFile())
	})

	t.Run("a cordoned node takes no new Pods", func(t *testing.T) {
		g := NewWithT(t)
		var node corev1.Node
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "node-1"}, &node)).To(Succeed())
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = true
		g.Expect(env.Client.Patch(ctx, &node, patch)).To(Succeed())
		defer func() {
			patch := client.MergeFrom(node.DeepCopy())
			node.Spec.Unschedulable = false
			g.Expect(env.Client.Patch(ctx, &node, patch)).To(Succeed())
		}()
		g.Eventually(func() bool {
			var n corev1.Node
			_ = mgr.GetClient().Get(ctx, client.ObjectKey{Name: "node-1"}, &n)
			return n.Spec.Unschedulable
		}).Should(BeTrue(), "the simulator's cache sees the cordon")
		for i := range 3 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cordon-%d", i)}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "web", Image: "nginx"}},
			}}
			g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
			g.Expect(running(g, pod.Name).Spec.NodeName).To(Equal("node-2"))
		}
	})

	t.Run("a Pod goes to the node its required node affinity names, as a DaemonSet's", func(t *testing.T) {
		g := NewWithT(t)
		// Spreading alone would alternate between the nodes.
		for i := range 3 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pinned-%d", i)}, Spec: corev1.PodSpec{
				Affinity:   pinnedTo("node-1"),
				Containers: []corev1.Container{{Name: "web", Image: "nginx"}},
			}}
			g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
			g.Expect(running(g, pod.Name).Spec.NodeName).To(Equal("node-1"))
		}
	})

	t.Run("a Pod no node accepts stays Pending", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nowhere"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelTopologyZone: "zone-9"},
			Containers:   []corev1.Container{{Name: "web", Image: "nginx"}},
		}}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		g.Eventually(func() (int, error) {
			evs, err := env.Events(ctx, ReportingController, pod.UID, "FailedScheduling")
			return len(evs), err
		}).Should(BeNumerically(">", 0))
		var p corev1.Pod
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p)).To(Succeed())
		g.Expect(p.Spec.NodeName).To(BeEmpty())
	})

	t.Run("a failed binding takes back the namespace made for it", func(t *testing.T) {
		g := NewWithT(t)
		// Another scheduler's Pod, which the running simulator leaves alone.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lost-binding"}, Spec: corev1.PodSpec{
			SchedulerName: "elsewhere",
			Containers:    []corev1.Container{{Name: "web", Image: "nginx"}},
		}}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		r := newPodReconciler(env.Client, mgr.GetEventRecorder(ReportingController), logr.Discard(), time.Now, Options{Nodes: nodes, LogDir: t.TempDir()})
		// The API server refuses a binding for another UID (a Pod deleted
		// and made again meanwhile) with a conflict.
		stale := pod.DeepCopy()
		stale.Spec.SchedulerName = ""
		stale.UID = "00000000-0000-0000-0000-000000000000"
		node, err := r.bind(ctx, stale)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(node).To(BeEmpty())
		g.Expect(r.pods).To(BeEmpty())
		g.Expect(r.bound).To(BeEmpty())
		for _, n := range r.nodes {
			g.Expect(n.used).To(BeEmpty(), "the address goes back to node %s", n.Name)
			g.Expect(n.count).To(BeZero())
		}
		_, statErr := os.Stat(netlab.Path(prefix + "-" + podRole(stale)))
		g.Expect(os.IsNotExist(statErr)).To(BeTrue(), "no namespace is left: %v", statErr)
		var p corev1.Pod
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p)).To(Succeed())
		g.Expect(p.Spec.NodeName).To(BeEmpty())
	})
}
