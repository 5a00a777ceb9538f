// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
)

// parityLab is two nodes, an outside client routed to node1 for the load
// balancer and external IPs, and one backend programming node1 directly
// (no API server: the model is built from objects made here).
type parityLab struct {
	lab          *netlab.Lab
	node1, node2 *netlab.Node
	client       string
	backend      dataplane.Backend
	serviceCIDRs []netip.Prefix
}

var (
	parityLBIP  = netip.MustParseAddr("192.168.77.1")
	parityExtIP = netip.MustParseAddr("192.168.78.2")
)

func newParityLab(t *testing.T, mode string) *parityLab {
	t.Helper()
	requireKernel(t)
	g := NewWithT(t)
	lab, err := netlab.New(fmt.Sprintf("svcnet-kp%04d", rand.IntN(10000)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(lab.Close)
	l := &parityLab{lab: lab, serviceCIDRs: []netip.Prefix{serviceCIDR}}
	l.node1, err = lab.AddNode("node1", netip.MustParsePrefix("192.168.50.11/24"), netip.MustParsePrefix("10.244.1.0/24"), serviceCIDR)
	g.Expect(err).NotTo(HaveOccurred())
	l.node2, err = lab.AddNode("node2", netip.MustParsePrefix("192.168.50.12/24"), netip.MustParsePrefix("10.244.2.0/24"), serviceCIDR)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.node1.Route(l.node2)).To(Succeed())
	g.Expect(l.node2.Route(l.node1)).To(Succeed())
	l.client, err = lab.AddClient("client", netip.MustParsePrefix(clientIP+"/24"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range []netip.Prefix{netip.PrefixFrom(parityLBIP, 32), netip.PrefixFrom(parityExtIP, 32)} {
		mustRun(t, lab, l.client, "ip", "route", "add", p.String(), "via", l.node1.IP.String())
	}
	// As a node's default route to its router: traffic for an address the
	// node does not serve is forwarded (and meets the forward hook's
	// rules), not answered "network unreachable" by routing.
	mustRun(t, lab, l.node1.NetNS, "ip", "route", "add", "default", "via", clientIP)
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	path := netlab.Path(l.node1.NetNS)
	switch mode {
	case agent.ModeNFTables:
		nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, path)
		g.Expect(err).NotTo(HaveOccurred())
		l.backend = nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{ClusterCIDRs: pods})
	default:
		l.backend = iptables.NewBackend(corev1.IPv4Protocol, iptables.NewExec(corev1.IPv4Protocol, path), iptables.Config{ClusterCIDRs: pods})
	}
	return l
}

// program renders svc with endpoints on node2 (their Pods') for node1 and
// applies node1's rules.
func (l *parityLab) program(t *testing.T, svc *corev1.Service, endpoints ...*netlab.Pod) {
	t.Helper()
	slice := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](podPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, p := range endpoints {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.IP.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(l.node2.Name)})
	}
	node := model.Node{Name: l.node1.Name, IPs: []netip.Addr{l.node1.IP}}
	l.backend.SetService(client.ObjectKeyFromObject(svc), model.BuildService(corev1.IPv4Protocol, node, svc, []*discoveryv1.EndpointSlice{slice}, model.Options{}))
	if _, err := l.backend.Sync(context.Background(), dataplane.Node{ServiceCIDRs: l.serviceCIDRs}); err != nil {
		t.Fatal(err)
	}
}

func (l *parityLab) pod(t *testing.T, n *netlab.Node, name string) *netlab.Pod {
	t.Helper()
	p, err := n.AddPod(name, podPort)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parityService(mutate func(*corev1.Service)) *corev1.Service {
	s := builder.Service("web", "ns").Port("http", 80, intstr.FromString("http")).Obj()
	s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
	mutate(s)
	return s
}

// timedOut tells whether err is a connection that got no answer at all
// (dropped), as opposed to one refused or reset.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestLocalPolicyWithoutLocalEndpoint: on a node with no endpoint of an
// externalTrafficPolicy: Local Service, its Pods and the node itself
// reach the load balancer IP, the node port and the external IP (going
// to the endpoints elsewhere), while an outside client's connections are
// dropped; kube-proxy's short-circuit, in both modes.
func TestLocalPolicyWithoutLocalEndpoint(t *testing.T) {
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			g := NewWithT(t)
			l := newParityLab(t, mode)
			server := l.pod(t, l.node2, "far")
			l.program(t, parityService(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.ExternalIPs = []string{parityExtIP.String()}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: parityLBIP.String()}}
			}), server)
			urls := map[string]string{
				"load balancer IP": fmt.Sprintf("http://%s/", parityLBIP),
				"node port":        fmt.Sprintf("http://%s:30080/", l.node1.IP),
				"external IP":      fmt.Sprintf("http://%s/", parityExtIP),
			}
			fromPod := netlab.Client(l.pod(t, l.node1, "near").NetNS, 2*time.Second)
			for what, url := range urls {
				body, err := netlab.Get(ctx, fromPod, url)
				g.Expect(err).NotTo(HaveOccurred(), "a Pod on node1 to the %s", what)
				g.Expect(body).To(HavePrefix(server.Name+" "), "a Pod on node1 to the %s", what)
			}
			body, err := netlab.Get(ctx, netlab.Client(l.node1.NetNS, 2*time.Second), urls["node port"])
			g.Expect(err).NotTo(HaveOccurred(), "node1 to its own node port")
			g.Expect(body).To(HavePrefix(server.Name+" "), "node1 to its own node port")

			outside := netlab.Client(l.client, time.Second)
			for what, url := range urls {
				_, err := netlab.Get(ctx, outside, url)
				g.Expect(timedOut(err)).To(BeTrue(), "an outside client to node1's %s must be dropped, got %v", what, err)
			}
		})
	}
}

// TestNFTablesClusterIPChecks: in nftables mode a new connection to a
// port a cluster IP does not define is refused at once, and the node's
// own traffic to an address of the ServiceCIDRs no Service has is dropped
// before it leaves (kube-proxy's cluster-ips-check).
func TestNFTablesClusterIPChecks(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	l := newParityLab(t, agent.ModeNFTables)
	server := l.pod(t, l.node2, "srv")
	l.program(t, parityService(func(*corev1.Service) {}), server)
	fromPod := netlab.Client(l.pod(t, l.node1, "cli").NetNS, 2*time.Second)
	fromNode := netlab.Client(l.node1.NetNS, 2*time.Second)
	body, err := netlab.Get(ctx, fromPod, "http://10.96.0.10:80/")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(body).To(HavePrefix(server.Name + " "))
	for who, hc := range map[string]*http.Client{"a Pod": fromPod, "the node": fromNode} {
		start := time.Now()
		_, err := netlab.Get(ctx, hc, "http://10.96.0.10:81/")
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")), "%s to an undefined port", who)
		g.Expect(time.Since(start)).To(BeNumerically("<", time.Second), "%s: the refusal took %s", who, time.Since(start))
	}
	// Without the drop the datagram would leave for eth0 (the node's route
	// for the range) and the write succeed.
	unallocated := netip.MustParseAddr("10.96.200.200")
	var conn net.Conn
	g.Expect(netns.Do(netlab.Path(l.node1.NetNS), func() (err error) {
		conn, err = net.Dial("udp", netip.AddrPortFrom(unallocated, 53).String())
		return err
	})).To(Succeed())
	t.Cleanup(func() { _ = conn.Close() })
	_, err = conn.Write([]byte("anyone?"))
	g.Expect(err).To(MatchError(ContainSubstring("operation not permitted")), "the node to the unallocated %s", unallocated)
}

// TestNFTablesAffinityRenewedByEachConnection: a ClientIP affinity entry
// lasts timeoutSeconds from the client's last connection, not its first,
// as in iptables mode (recent --rcheck --seconds) and kube-proxy's
// nftables mode.
func TestNFTablesAffinityRenewedByEachConnection(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	l := newParityLab(t, agent.ModeNFTables)
	const timeout = 4 * time.Second
	l.program(t, parityService(func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(timeout / time.Second))}}
	}), l.pod(t, l.node2, "a1"), l.pod(t, l.node2, "a2"))
	client := l.pod(t, l.node1, "cli")
	hc := netlab.Client(client.NetNS, 2*time.Second)
	remembered := func() bool {
		out, err := l.lab.Run(l.node1.NetNS, "nft", "list", "table", "ip", nftables.TableName)
		g.Expect(err).NotTo(HaveOccurred())
		return affinityHolds(out, client.IP)
	}
	g.Expect(remembered()).To(BeFalse(), "an entry for the client before it connects")

	first := time.Now()
	_, err := netlab.Get(ctx, hc, "http://10.96.0.10:80/")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remembered()).To(BeTrue(), "no entry for the client after its first connection")
	time.Sleep(time.Until(first.Add(timeout * 5 / 8)))
	_, err = netlab.Get(ctx, hc, "http://10.96.0.10:80/")
	g.Expect(err).NotTo(HaveOccurred())
	second := time.Now()
	// Past the first connection's timeout, within the second's.
	time.Sleep(time.Until(first.Add(timeout * 5 / 4)))
	held := remembered()
	if checked := time.Now(); checked.After(second.Add(timeout)) {
		t.Fatalf("the machine is too slow for this test: checked %s after the second connection", checked.Sub(second))
	}
	g.Expect(held).To(BeTrue(), "the client's entry expired %s after its first connection, though it connected again %s later",
		timeout, second.Sub(first))
}

// affinityHolds tells whether a listing of svcnet's table has ip in one
// of its affinity sets.
func affinityHolds(listing string, ip netip.Addr) bool {
	in := false
	for _, line := range strings.Split(listing, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "set affinity-"):
			in = true
		case strings.HasPrefix(t, "set ") || strings.HasPrefix(t, "map ") || strings.HasPrefix(t, "chain "):
			in = false
		case in && (strings.Contains(t, ip.String()+" ") || strings.Contains(t, ip.String()+",")):
			return true
		}
	}
	return false
}

// TestLoadBalancerSourceRangesAllowTheNode: when the node's IP is in a
// Service's loadBalancerSourceRanges, the node's own connection to its
// load balancer IP (held on the node, as an L2 announcer or VIP holds it;
// the connection then leaves from that IP) is let through, in both modes
// (kube-proxy's allowFromNode); ranges padded with spaces count.
func TestLoadBalancerSourceRangesAllowTheNode(t *testing.T) {
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			g := NewWithT(t)
			l := newParityLab(t, mode)
			mustRun(t, l.lab, l.node1.NetNS, "ip", "addr", "add", netip.PrefixFrom(parityLBIP, 32).String(), "dev", "lo")
			server := l.pod(t, l.node2, "lb")
			l.program(t, parityService(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.LoadBalancerSourceRanges = []string{" 192.168.50.0/24 "}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: parityLBIP.String()}}
			}), server)
			url := fmt.Sprintf("http://%s/", parityLBIP)
			body, err := netlab.Get(ctx, netlab.Client(l.node1.NetNS, 2*time.Second), url)
			g.Expect(err).NotTo(HaveOccurred(), "node1 to its own load balancer IP")
			g.Expect(body).To(HavePrefix(server.Name+" "), "node1 to its own load balancer IP")
			body, err = netlab.Get(ctx, netlab.Client(l.client, 2*time.Second), url)
			g.Expect(err).NotTo(HaveOccurred(), "a client inside the padded range")
			g.Expect(body).To(HavePrefix(server.Name+" "), "a client inside the padded range")
		})
	}
}
