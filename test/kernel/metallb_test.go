// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/trafficload"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// metallbNamespace is where MetalLB's objects and processes live, as its
// manifests install it.
const metallbNamespace = "metallb-system"

// TestMigrateFromMetalLB moves a cluster's LoadBalancer addresses from
// MetalLB (its controller and L2 speaker, built from its Go module by
// `make metallb`) to svcnet, as docs/operations.md ("Coming from
// MetalLB") tells an operator to, under traffic: a client on the nodes'
// segment opens a TCP connection to the Service's address every few
// milliseconds and keeps one open. kube-proxy serves the traffic
// throughout; only the LoadBalancer part moves (svcnet's agents run on
// standby, announcing). The address must not change, no new connection
// may fail and the long-lived one must survive.
func TestMigrateFromMetalLB(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	bins := metallbBinDir(t)

	c := newBareCluster(t, agent.ModeIPTables, "svcnet-ml", 2)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(c.env.WriteKubeconfig(kubeconfig)).To(Succeed())
	_, err := envtest.InstallCRDs(c.env.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(bins, "crds")}})
	g.Expect(err).NotTo(HaveOccurred(), "installing MetalLB's CRDs")
	var names []string
	for _, n := range c.nodes {
		c.forwardAPIServer(t, n)
		c.labelNode(t, n, agent.NodeProxyKubeProxy)
		names = append(names, n.Name)
	}
	g.Expect(c.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metallbNamespace}})).To(Succeed())
	c.startKubeControllerManager(t, kubeconfig) // the EndpointSlices, throughout

	// The address is on the nodes' segment, so the client asks for it by
	// ARP. It is one that svcnet's own election gives to another node than
	// MetalLB's: the converted announcement's MetalLB election must keep it
	// where it is (see metallbL2Owner for why that matters).
	vip := divergingOwnerAddr(t, names)
	t.Logf("address %s: MetalLB's L2 owner %s, svcnet's rendezvous owner %s", vip, metallbL2Owner(vip, names),
		announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, vip, names)[0])
	createMetalLBConfig(t, c.env.Client, vip)

	ns, err := c.env.Namespace(ctx, "metallb")
	g.Expect(err).NotTo(HaveOccurred())
	for _, n := range c.nodes {
		c.addPods(t, ns, "web", n, 1)
	}
	svc := webService(ns, "web")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc = c.service(t, svc)

	// MetalLB's controller gives the address, as it does in a cluster: it
	// is MetalLB's own allocation the move must keep.
	mlbController := startProcess(t, []string{filepath.Join(bins, "controller"), "--namespace=" + metallbNamespace,
		"--pod-name=" + createMetalLBPod(t, c, "controller", "controller", ""),
		"--webhook-mode=disabled", "--disable-cert-rotation", "--port=19120", "--health-probe-port=19121", "--log-level=info"},
		"", "KUBECONFIG="+kubeconfig)
	var ingress []corev1.LoadBalancerIngress
	g.Eventually(func(g Gomega) {
		var got corev1.Service
		g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &got)).To(Succeed())
		g.Expect(got.Status.LoadBalancer.Ingress).To(HaveLen(1))
		g.Expect(got.Status.LoadBalancer.Ingress[0].IP).To(Equal(vip.String()))
		ingress = got.Status.LoadBalancer.Ingress
	}).WithTimeout(converge).WithPolling(poll).Should(Succeed(), "MetalLB's controller gives the Service its address")

	speakers := map[string]*nodeProcess{}
	for _, n := range c.nodes {
		c.startKubeProxy(t, n, kubeconfig, agent.ModeIPTables)
		// Without memberlist (no --ml-bindport): every node is taken to
		// run a speaker, and the owner is the first by MetalLB's hash.
		speakers[n.Name] = c.startNodeProcess(t, []string{filepath.Join(bins, "speaker"), "--node-name=" + n.Name,
			"--namespace=" + metallbNamespace, "--pod-name=" + createMetalLBPod(t, c, "speaker-"+n.Name, "speaker", n.Name), "--port=19120", "--health-probe-port=19121", "--log-level=info"},
			n, "KUBECONFIG="+kubeconfig)
	}
	url := "http://" + net.JoinHostPort(vip.String(), "80") + "/"
	hc := netlab.Client(c.client, 2*time.Second)
	g.Eventually(func() error { _, err := netlab.Get(ctx, hc, url); return err }).
		WithTimeout(converge).WithPolling(poll).Should(Succeed(), "MetalLB announces the address and kube-proxy serves it")
	macs := nodeMACs(t, c)
	owner := metallbL2Owner(vip, names)
	g.Expect(clientNeighbour(c, vip)).To(ContainSubstring(macs[owner]), "MetalLB's speaker on %s answers for the address", owner)

	load := startLoadBalancerLoad(t, c.client, vip)
	defer load.Stop()

	// MetalLB's configuration becomes svcnet's, as `svcnet migrate
	// metallb` writes it.
	objs, err := metallb.List(ctx, c.env.Client)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := metallb.Convert(objs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Warnings).To(BeEmpty())
	for i := range res.Pools {
		g.Expect(c.env.Client.Create(ctx, &res.Pools[i])).To(Succeed())
	}
	for i := range res.Announcements {
		g.Expect(c.env.Client.Create(ctx, &res.Announcements[i])).To(Succeed())
	}

	// The allocators: MetalLB's controller stops first, so that never two
	// allocate at once; the addresses stay in the Services' status, where
	// svcnet's loadbalancer controller finds them in its pools and keeps
	// them.
	mlbController.stop()
	c.startManager(t, controllers.LoadBalancerName, controllers.AnnouncementName)

	// The announcers: svcnet's agents start first, and MetalLB's speakers
	// stop only once svcnet's owner announces. Stopping MetalLB first
	// would leave the address unanswered until svcnet's agents have
	// listened their dead interval; the other way round both answer for
	// a moment, which is harmless here: every node's kube-proxy serves
	// the address, and both name the same node (the MetalLB election). The owner's gratuitous
	// ARP, as it takes the address, is what the client's neighbour entry
	// follows from then on.
	agents := map[string]*nodeProcess{}
	for _, n := range c.nodes {
		agents[n.Name] = c.startAnnouncingAgent(t, n, kubeconfig)
	}
	g.Eventually(agents[owner].count("Announcing address")).WithTimeout(converge).WithPolling(poll).Should(BeNumerically(">=", 1),
		"svcnet's agent on %s announces the address", owner)
	expectServing(g, load, "MetalLB's speakers and svcnet's agents")
	for _, n := range c.nodes {
		speakers[n.Name].stop()
	}
	expectServing(g, load, "svcnet's agents alone")
	g.Expect(clientNeighbour(c, vip)).To(ContainSubstring(macs[owner]), "the client's neighbour entry names %s", owner)

	var after corev1.Service
	g.Expect(c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &after)).To(Succeed())
	g.Expect(after.Status.LoadBalancer.Ingress).To(Equal(ingress), "the Service's address changed")
	g.Eventually(func() ([]string, error) {
		var evs corev1.EventList
		err := c.env.Client.List(ctx, &evs, client.InNamespace(svc.Namespace))
		var out []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == svc.Name && e.Reason == loadbalancer.ReasonAdopted {
				out = append(out, e.Message)
			}
		}
		return out, err
	}).WithTimeout(converge).WithPolling(poll).Should(ConsistOf(HavePrefix(fmt.Sprintf(`Kept %s, given by field manager "controller"`, vip))),
		"the adoption names MetalLB's controller")

	expectNoFailure(t, g, load.Stop())
}

// metallbBinDir is bin/metallb at the root of this module, where `make
// metallb` builds MetalLB's speaker and controller and copies its CRDs.
func metallbBinDir(t *testing.T) string {
	t.Helper()
	bins, err := testenv.ModuleBinDir("metallb", "speaker")
	if err != nil {
		t.Fatal(err)
	}
	return bins
}

// createMetalLBConfig writes MetalLB's configuration for an L2 address:
// an IPAddressPool holding addr alone and an L2Advertisement of it on
// eth0.
func createMetalLBConfig(t *testing.T, c client.Client, addr netip.Addr) {
	t.Helper()
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": metallb.Group + "/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "lan", "namespace": metallbNamespace},
		"spec":     map[string]any{"addresses": []any{netip.PrefixFrom(addr, addr.BitLen()).String()}},
	}}
	l2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": metallb.Group + "/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "lan", "namespace": metallbNamespace},
		"spec":     map[string]any{"ipAddressPools": []any{"lan"}, "interfaces": []any{"eth0"}},
	}}
	for _, o := range []client.Object{pool, l2} {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// createMetalLBPod creates the Pod object a MetalLB process would run
// in (image: MetalLB's component), on node (none: unscheduled), and
// returns its name: MetalLB's
// controller and speaker read their own Pod at start, to own the objects
// they write.
func createMetalLBPod(t *testing.T, c *cluster, name, component, node string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metallbNamespace, Labels: map[string]string{"app": "metallb"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "metallb", Image: "quay.io/metallb/" + component}}},
	}
	if err := c.env.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return name
}

// metallbL2Owner is the node MetalLB's speakers (v0.16, memberlist off
// or all speakers alive) let answer for addr: the first of the nodes by
// sha256(node + "#" + addr), lowest first (speaker/layer2_controller.go,
// ShouldAnnounce), written here from MetalLB's source, apart from
// svcnet's code. svcnet's own election (Rendezvous) ranks otherwise, so
// the two may choose different nodes. Then a move would shift the
// client's traffic to another node, and a connection it had through the
// old one would stop being answered (seen with this test before the
// converter set the MetalLB election): the new node has no conntrack
// entry for it, so kube-proxy balances its next packet afresh and
// masquerades it with its own address.
func metallbL2Owner(addr netip.Addr, nodes []string) string {
	return slices.MinFunc(nodes, func(a, b string) int {
		ha := sha256.Sum256([]byte(a + "#" + addr.String()))
		hb := sha256.Sum256([]byte(b + "#" + addr.String()))
		return bytes.Compare(ha[:], hb[:])
	})
}

// divergingOwnerAddr is the first address from 192.168.50.200 that
// MetalLB and svcnet's own election give to different nodes.
func divergingOwnerAddr(t *testing.T, nodes []string) netip.Addr {
	t.Helper()
	for a := netip.MustParseAddr("192.168.50.200"); a.Less(netip.MustParseAddr("192.168.50.250")); a = a.Next() {
		if metallbL2Owner(a, nodes) != announcementpolicy.Rank(svcnetv1alpha1.L2NodeElectionRendezvous, a, nodes)[0] {
			return a
		}
	}
	t.Fatal("no address that MetalLB and svcnet's rendezvous give to different nodes")
	return netip.Addr{}
}

// startAnnouncingAgent runs svcnet's agent on node n on standby (the
// node stays labelled for kube-proxy) with its speaker on: it writes no
// rules, and announces the LoadBalancer addresses its node owns.
func (c *cluster) startAnnouncingAgent(t *testing.T, n *netlab.Node, kubeconfig string) *nodeProcess {
	t.Helper()
	return c.startNodeProcess(t, []string{os.Args[0], "--kubeconfig", kubeconfig, "--node-name", n.Name, "--mode", agent.ModeIPTables,
		"--cluster-cidr", "10.244.0.0/16", "--conntrack-max-per-core=0", "--announce=true",
		"--healthz-bind-address=0", "--metrics-bind-address=0"}, n, agentProcessEnv+"="+agentProcess)
}

// nodeMACs is each node's eth0 address on the segment.
func nodeMACs(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	macs := map[string]string{}
	for _, n := range c.nodes {
		err := netns.Do(netlab.Path(n.NetNS), func() error {
			ifi, err := net.InterfaceByName("eth0")
			if err == nil {
				macs[n.Name] = ifi.HardwareAddr.String()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return macs
}

// clientNeighbour is the client's neighbour entry for addr.
func clientNeighbour(c *cluster, addr netip.Addr) string {
	out, _ := c.lab.Run(c.client, "ip", "neigh", "show", addr.String(), "dev", "eth0")
	return strings.TrimSpace(out)
}

// startLoadBalancerLoad is a migration's load from the client outside the
// nodes to a LoadBalancer address: new TCP connections every few
// milliseconds and one long-lived connection.
func startLoadBalancerLoad(t *testing.T, clientNS string, addr netip.Addr) *trafficload.Load {
	t.Helper()
	l := newMigrationLoad(t)
	l.NewConnections(clientNS, "http://"+net.JoinHostPort(addr.String(), "80")+"/")
	if err := l.KeepConnection(clientNS, addr.String()); err != nil {
		t.Fatal(err)
	}
	return l
}
