// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestUpIPFamilies runs `svcnet up --nodes=2 --ip-family=ipv6` (nftables,
// LoadBalancer addresses by BGP over IPv6 to the client's router) and
// `--ip-family=dual` (iptables, by ARP and NDP on the segment), as kind's
// ipFamily, and on each follows the seeds' demo verbatim (a busybox Pod
// fetching my-service by name), then reaches nginx from the client
// namespace over every family of the cluster through a Service of each
// type: each ClusterIP, each node's address of each family on a
// nodePort, and a LoadBalancer address of each family; and cluster DNS
// answers a Service's name with its ClusterIP of every family (A and
// AAAA), and a headless Service's with every Pod address of every
// family; and session affinity, both traffic policies, source ranges
// and ExternalName work over every family (checkFamilyPolicies).
func TestUpIPFamilies(t *testing.T) {
	requireNetns(t)
	for _, tc := range []struct {
		family, mode, announce string
		families               []corev1.IPFamily
	}{
		{"ipv6", "nftables", "bgp", []corev1.IPFamily{corev1.IPv6Protocol}},
		{"dual", "iptables", "l2", []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
	} {
		t.Run(tc.family, func(t *testing.T) { testUpFamily(t, tc.family, tc.mode, tc.announce, tc.families) })
	}
}

func testUpFamily(t *testing.T, family, mode, announce string, families []corev1.IPFamily) {
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--ip-family="+family, "--proxy-mode="+mode, "--lb-announce="+announce))
	t.Cleanup(func() { stopUp(t, up) })
	c := kubeClient(t, dataDir)
	ctx := context.Background()

	nodes := checkNodeFamilies(t, c, families)
	t.Run("the seeds' demo, verbatim", func(t *testing.T) { seedsDemo(t, dataDir, c) })

	policy := corev1.IPFamilyPolicySingleStack
	if len(families) == 2 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	services := map[corev1.ServiceType]*corev1.Service{}
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "families-" + strings.ToLower(string(typ))},
			Spec: corev1.ServiceSpec{Type: typ, IPFamilyPolicy: &policy, Selector: map[string]string{"app": "nginx"},
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
		}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatalf("creating %s: %v", svc.Name, err)
		}
		services[typ] = svc
	}
	for typ, svc := range services {
		if got := ipfamily.OfService(svc); !slices.Equal(got, families) {
			t.Errorf("%s Service: families %v, want %v", typ, got, families)
		}
		if len(svc.Spec.ClusterIPs) != len(families) {
			t.Fatalf("%s Service: ClusterIPs %v, want one of each of %v", typ, svc.Spec.ClusterIPs, families)
		}
		for _, ip := range svc.Spec.ClusterIPs {
			reachNginx(t, "ClusterIP", hostPort(ip, 80))
		}
	}
	port := int(services[corev1.ServiceTypeNodePort].Spec.Ports[0].NodePort)
	for _, addrs := range nodes {
		for _, a := range addrs {
			reachNginx(t, "NodePort", hostPort(a, port))
		}
	}
	for _, ip := range loadBalancerIPs(t, c, services[corev1.ServiceTypeLoadBalancer], families) {
		if !reachNginx(t, "LoadBalancer", hostPort(ip, 80)) {
			logRoutes(t, ip, "svcnet-client", "svcnet-router")
		}
	}
	checkDNSFamilies(t, c, services[corev1.ServiceTypeClusterIP], services[corev1.ServiceTypeClusterIP].Spec.ClusterIPs)
	checkDNSFamilies(t, c, headlessNginx(t, c, policy), nginxPodIPs(t, c))
	t.Run("policies, affinity, source ranges and ExternalName", func(t *testing.T) { checkFamilyPolicies(t, c, policy, nodes) })
}

// headlessNginx creates a headless Service of nginx's Pods with policy.
func headlessNginx(t *testing.T, c client.Client, policy corev1.IPFamilyPolicy) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "families-headless"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, IPFamilyPolicy: &policy, Selector: map[string]string{"app": "nginx"},
			Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatalf("creating %s: %v", svc.Name, err)
	}
	return svc
}

// nginxPodIPs are the addresses, of every family, of nginx's running Pods.
func nginxPodIPs(t *testing.T, c client.Client) []string {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace("default"), client.MatchingLabels{"app": "nginx"}); err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
	}
	return ips
}

// checkNodeFamilies checks that every Node has a Pod CIDR and an
// InternalIP of each family, in the cluster's order, and returns the
// InternalIPs by Node.
func checkNodeFamilies(t *testing.T, c client.Client, families []corev1.IPFamily) map[string][]string {
	t.Helper()
	var list corev1.NodeList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, n := range list.Items {
		var cidrFams, ipFams []corev1.IPFamily
		for _, p := range n.Spec.PodCIDRs {
			cidrFams = append(cidrFams, ipfamily.OfPrefix(netip.MustParsePrefix(p)))
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				f, _ := ipfamily.OfString(a.Address)
				ipFams = append(ipFams, f)
				out[n.Name] = append(out[n.Name], a.Address)
			}
		}
		if !slices.Equal(cidrFams, families) || !slices.Equal(ipFams, families) {
			t.Errorf("Node %s: Pod CIDRs %v and InternalIPs %v, want one of each of %v", n.Name, n.Spec.PodCIDRs, out[n.Name], families)
		}
	}
	return out
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }

// reachNginx fetches nginx's welcome page at addr from the client
// namespace, waiting for the nodes' rules, and tells whether it did.
func reachNginx(t *testing.T, what, addr string) bool {
	t.Helper()
	url := "http://" + addr + "/"
	var body string
	var err error
	if werr := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err = fromClient(ctx, "svcnet-client", url)
		return err == nil && strings.Contains(body, "Welcome to nginx!"), nil
	}); werr != nil {
		t.Errorf("%s %s from the client: %v %.200q", what, url, err, body)
		return false
	}
	return true
}

// logRoutes logs how each of the namespaces routes ip, for a failure
// that depends on the route (BGP's, the router's, the client's).
func logRoutes(t *testing.T, ip string, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		out, err := exec.Command("ip", "-n", ns, "route", "get", ip).CombinedOutput()
		t.Logf("%s: ip route get %s: %s %v", ns, ip, strings.TrimSpace(string(out)), err)
	}
}

// loadBalancerIPs waits for svc's ingress to hold an address of each
// family and returns them.
func loadBalancerIPs(t *testing.T, c client.Client, svc *corev1.Service, families []corev1.IPFamily) []string {
	t.Helper()
	var ips []string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return false, err
		}
		ips = nil
		var fams []corev1.IPFamily
		for _, in := range svc.Status.LoadBalancer.Ingress {
			f, _ := ipfamily.OfString(in.IP)
			ips, fams = append(ips, in.IP), append(fams, f)
		}
		slices.Sort(fams)
		want := slices.Sorted(slices.Values(families))
		return slices.Equal(fams, want), nil
	}); err != nil {
		t.Fatalf("%s: ingress %v, want an address of each of %v", svc.Name, svc.Status.LoadBalancer.Ingress, families)
	}
	return ips
}

// checkDNSFamilies asks kube-dns, from the client namespace, for svc's
// name and wants the addresses ips back (A and AAAA).
func checkDNSFamilies(t *testing.T, c client.Client, svc *corev1.Service, ips []string) {
	t.Helper()
	var dns corev1.Service
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, &dns); err != nil {
		t.Fatal(err)
	}
	dial := netns.DialContext(netlab.Path("svcnet-client"))
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dial(ctx, network, hostPort(dns.Spec.ClusterIP, 53))
	}}
	name := fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, svc.Namespace)
	want := slices.Sorted(slices.Values(ips))
	var got []string
	var err error
	if werr := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, dnsTimeout, true, func(ctx context.Context) (bool, error) {
		got, err = r.LookupHost(ctx, name)
		slices.Sort(got)
		return err == nil && slices.Equal(got, want), nil
	}); werr != nil {
		t.Errorf("kube-dns at %s answers %s with %v (%v), want %v", dns.Spec.ClusterIP, name, got, err, want)
	}
}
