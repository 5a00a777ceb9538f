// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// newNetNS makes an empty network namespace, loopback up, removed at
// cleanup.
func newNetNS(t *testing.T, name string) string {
	t.Helper()
	path := netlab.Path(name)
	if err := netns.Create(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(path) })
	if out, err := runIn(path, "ip", "link", "set", "lo", "up"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return path
}

// runIn runs a command inside the namespace at path.
func runIn(path string, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := netns.Run(path, cmd)
	return out.String(), err
}

// TestNFAcctCountsPackets checks the nfacct client against the kernel:
// a counter it ensures is what `iptables -m nfacct` counts into, Get
// reads what the rule counted, ensuring again keeps the figures, and
// counters belong to their network namespace.
func TestNFAcctCountsPackets(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	nsA, nsB := newNetNS(t, "svcnet-nfacct-a"), newNetNS(t, "svcnet-nfacct-b")
	const name = "svcnet_kernel_test_pkts"
	acct := nfacct.New(nsA)
	g.Expect(acct.Available()).To(Succeed())
	_, err := acct.Get(name)
	g.Expect(err).To(MatchError(nfacct.ErrNotFound))

	// iptables refuses a rule naming a counter that does not exist,
	// which is why the backend writes the match only for those it has.
	out, err := runIn(nsA, "iptables", "-w", "-A", "OUTPUT", "-m", "nfacct", "--nfacct-name", name, "-j", "ACCEPT")
	g.Expect(err).To(HaveOccurred(), "iptables took a rule counting into a missing counter: %s", out)

	g.Expect(acct.Ensure(name)).To(Succeed())
	g.Expect(acct.Get(name)).To(Equal(nfacct.Counter{Name: name}))

	var receiver net.PacketConn
	g.Expect(netns.Do(nsA, func() error {
		var err error
		receiver, err = net.ListenPacket("udp4", "127.0.0.1:0")
		return err
	})).To(Succeed())
	defer receiver.Close()
	port := strconv.Itoa(receiver.LocalAddr().(*net.UDPAddr).Port)
	out, err = runIn(nsA, "iptables", "-w", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--dport", port,
		"-m", "nfacct", "--nfacct-name", name, "-j", "ACCEPT")
	g.Expect(err).NotTo(HaveOccurred(), out)

	const datagrams, payload = 5, 100
	var sender net.Conn
	g.Expect(netns.Do(nsA, func() error {
		var err error
		sender, err = net.Dial("udp4", receiver.LocalAddr().String())
		return err
	})).To(Succeed())
	defer sender.Close()
	buf := make([]byte, payload)
	for range datagrams {
		_, err := sender.Write(buf)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(receiver.SetReadDeadline(time.Now().Add(5 * time.Second))).To(Succeed())
		_, _, err = receiver.ReadFrom(buf)
		g.Expect(err).NotTo(HaveOccurred(), "a datagram did not arrive")
	}
	const ipUDPHeaders = 20 + 8
	want := nfacct.Counter{Name: name, Packets: datagrams, Bytes: datagrams * (ipUDPHeaders + payload)}
	g.Expect(acct.Get(name)).To(Equal(want))
	g.Expect(acct.Ensure(name)).To(Succeed())
	g.Expect(acct.Get(name)).To(Equal(want), "Ensure of an existing counter must keep its figures")

	_, err = nfacct.New(nsB).Get(name)
	g.Expect(err).To(MatchError(nfacct.ErrNotFound), "a counter of another namespace")
	g.Expect(nfacct.New(nsA).Ensure(strings.Repeat("n", nfacct.MaxNameLen+1))).To(MatchError(nfacct.ErrInvalidName))
}

// TestIPTablesRulesCountWithEitherVariant applies the backend's counting
// rules with iptables-nft and iptables-legacy, through the real client:
// both take kube-proxy's nfacct matches once the backend ensured the
// counters, and a Service's localhost NodePort rule counts into its own.
func TestIPTablesRulesCountWithEitherVariant(t *testing.T) {
	requireKernel(t)
	for _, variant := range []iptables.Variant{iptables.VariantNFT, iptables.VariantLegacy} {
		t.Run(string(variant), func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			node := newNetNS(t, "svcnet-nfacct-"+string(variant))
			ipt := iptables.NewExecVariant(corev1.IPv4Protocol, node, variant)
			b := iptables.NewBackend(corev1.IPv4Protocol, ipt, iptables.Config{}, iptables.WithAccounting(nfacct.New(node)))
			b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{{
				Name: "ns/web:http", Namespace: "ns", Service: "web", Protocol: corev1.ProtocolTCP,
				ClusterIP: netip.MustParseAddr("10.96.0.10"), Port: 80, NodePort: 30080, HasEndpoints: true,
				ClusterEndpoints: []model.Endpoint{{IP: netip.MustParseAddr("10.244.1.1"), Port: 8080}},
			}})
			_, err := b.Sync(ctx, dataplane.Node{})
			g.Expect(err).NotTo(HaveOccurred())
			var saved strings.Builder
			for _, table := range []string{"filter", "nat"} {
				out, err := ipt.Save(ctx, table)
				g.Expect(err).NotTo(HaveOccurred())
				saved.Write(out)
			}
			// iptables-save prints two spaces after --nfacct-name.
			g.Expect(saved.String()).To(And(
				MatchRegexp(`-A KUBE-FORWARD .*--ctstate INVALID -m nfacct --nfacct-name +ct_state_invalid_dropped_pkts -j DROP`),
				MatchRegexp(`-A KUBE-NODEPORTS -d 127.0.0.0/8 .*--dport 30080 -m nfacct --nfacct-name +localhost_nps_accepted_pkts -j KUBE-EXT-`)))
			for _, name := range []string{iptables.CounterInvalidDropped, iptables.CounterLocalhostNodePorts} {
				g.Expect(nfacct.New(node).Get(name)).To(Equal(nfacct.Counter{Name: name}))
			}
			g.Expect(iptables.Cleanup(ctx, ipt)).To(Succeed())
		})
	}
}

// TestLocalhostNodePortMetric is upstream's e2e "[sig-network] KubeProxy
// should update metric for tracking accepted packets destined for
// localhost nodeports [Feature:KubeProxyNFAcct]" on one node: the agent
// runs as a process in the node, serving metrics on kube-proxy's
// 127.0.0.1:10249 there; ten connections to a NodePort on 127.0.0.1 from
// the node raise kubeproxy_iptables_localhost_nodeports_accepted_packets_total
// by ten.
func TestLocalhostNodePortMetric(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	ctx := context.Background()
	c := newCluster(t, agent.ModeIPTables, "svcnet-kc", 1, endpointslice.ControllerName)
	n := c.nodes[0]
	kubeconfig := filepath.Join(c.logDir, "kubeconfig")
	g.Expect(c.env.WriteKubeconfig(kubeconfig)).To(Succeed())
	c.forwardAPIServer(t, n)
	const metricsAddr = "127.0.0.1:10249"
	c.startAgentProcess(t, n, kubeconfig, "--metrics-bind-address="+metricsAddr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rules on %s:\n%s", n.Name, c.rules(n))
		}
	})

	ns, err := c.env.Namespace(ctx, t.Name())
	g.Expect(err).NotTo(HaveOccurred())
	c.addPods(t, ns, "nfacct", n, 1)
	svc := webService(ns, "nfacct")
	svc.Spec.Type = corev1.ServiceTypeNodePort
	svc = c.service(t, svc)
	url := fmt.Sprintf("http://127.0.0.1:%d/", svc.Spec.Ports[0].NodePort)
	hc := netlab.Client(n.NetNS, 2*time.Second) // a connection per request, as curl
	g.Eventually(func() (string, error) { return netlab.Get(ctx, hc, url) }).WithTimeout(converge).WithPolling(poll).Should(HavePrefix("p"))

	scrape := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: netns.DialContext(netlab.Path(n.NetNS))}}
	const localhost, invalid = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total", "kubeproxy_iptables_ct_state_invalid_dropped_packets_total"
	before := metrics(g, scrape, "http://"+metricsAddr+"/metrics")
	g.Expect(before).To(HaveKey(localhost))
	g.Expect(before).To(HaveKey(invalid), "the INVALID drop counter is exported too")
	g.Expect(before[localhost]).To(BeNumerically(">=", 1), "the connection that found the Service programmed")
	const requests = 10
	for range requests {
		g.Expect(netlab.Get(ctx, hc, url)).To(HavePrefix("p"))
	}
	after := metrics(g, scrape, "http://"+metricsAddr+"/metrics")
	t.Logf("%s went from %v to %v; %s is %v", localhost, before[localhost], after[localhost], invalid, after[invalid])
	g.Expect(after[localhost]-before[localhost]).To(BeNumerically("==", requests), "one counted packet per connection")
}

// metrics scrapes a Prometheus endpoint for the values of its samples
// without labels.
func metrics(g Gomega, hc *http.Client, url string) map[string]float64 {
	resp, err := hc.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		g.Expect(err).NotTo(HaveOccurred(), sc.Text())
		out[name] = v
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}
