// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// familiesNS holds the policies' workload of TestUpIPFamilies.
const familiesNS = "families"

// echoImage serves /hostname (the Pod's name) and /clientip (the
// source address a request came from).
const echoImage = "registry.k8s.io/e2e-test-images/agnhost:2.53"

// checkFamilyPolicies runs, in namespace families, an agnhost netexec Pod
// and a client Pod on each node, and checks over every ClusterIP or
// LoadBalancer address of every family: ClientIP session affinity keeps
// a client on one Pod; internalTrafficPolicy Local keeps a Pod's
// requests on its node; externalTrafficPolicy Local keeps the outside
// client's source address; loadBalancerSourceRanges let the client in
// and, changed to ranges without it, shut it out; an ExternalName
// Service's name resolves, through its CNAME, to another Service's
// addresses of every family.
func checkFamilyPolicies(t *testing.T, c client.Client, policy corev1.IPFamilyPolicy, nodes map[string][]string) {
	names := slices.Sorted(maps.Keys(nodes))
	runEchoWorkload(t, c, names)
	port := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}
	echo := func(name string, typ corev1.ServiceType, edit func(*corev1.ServiceSpec)) *corev1.Service {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: familiesNS, Name: name},
			Spec: corev1.ServiceSpec{Type: typ, IPFamilyPolicy: &policy, Selector: map[string]string{"app": "echo"}, Ports: port}}
		edit(&svc.Spec)
		if err := c.Create(context.Background(), svc); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		waitReadyEndpoints(t, c, svc, len(names))
		return svc
	}

	t.Run("ClientIP session affinity", func(t *testing.T) {
		svc := echo("affinity", corev1.ServiceTypeClusterIP, func(s *corev1.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityClientIP })
		for _, ip := range svc.Spec.ClusterIPs {
			if got := answerers(t, "svcnet-client", "http://"+hostPort(ip, 80)+"/hostname", 20); len(got) != 1 {
				t.Errorf("affinity ClusterIP %s: the client reached %v, want one Pod", ip, got)
			}
		}
	})
	t.Run("internalTrafficPolicy Local", func(t *testing.T) {
		svc := echo("itp-local", corev1.ServiceTypeClusterIP, func(s *corev1.ServiceSpec) {
			s.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		})
		for _, n := range names {
			for _, ip := range svc.Spec.ClusterIPs {
				got := answerers(t, podNetNSIn(familiesNS, "client-"+n), "http://"+hostPort(ip, 80)+"/hostname", 10)
				if !slices.Equal(got, []string{"echo-" + n}) {
					t.Errorf("internalTrafficPolicy Local ClusterIP %s from %s's client: reached %v, want only echo-%s", ip, n, got, n)
				}
			}
		}
	})
	t.Run("externalTrafficPolicy Local and loadBalancerSourceRanges", func(t *testing.T) {
		svc := echo("etp-local", corev1.ServiceTypeLoadBalancer, func(s *corev1.ServiceSpec) {
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		checkLocalAndSourceRanges(t, c, svc, nodes)
	})
	t.Run("ExternalName", func(t *testing.T) {
		target := echo("target", corev1.ServiceTypeClusterIP, func(*corev1.ServiceSpec) {})
		ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: familiesNS, Name: "external"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "target." + familiesNS + ".svc.cluster.local"}}
		if err := c.Create(context.Background(), ext); err != nil {
			t.Fatal(err)
		}
		checkDNSFamilies(t, c, ext, target.Spec.ClusterIPs)
	})
}

// runEchoWorkload starts echo-<node> and client-<node> on every node and
// waits until they are Ready.
func runEchoWorkload(t *testing.T, c client.Client, nodes []string) {
	t.Helper()
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: familiesNS}}}
	for _, n := range nodes {
		objs = append(objs,
			pinnedPodIn(familiesNS, "echo-"+n, n, map[string]string{"app": "echo"}, corev1.Container{Name: "echo", Image: echoImage, Args: []string{"netexec", "--http-port=8080"}}),
			pinnedPodIn(familiesNS, "client-"+n, n, nil, corev1.Container{Name: "pause", Image: "registry.k8s.io/pause:3.10"}))
	}
	createAndWaitReady(t, c, familiesNS, objs, 2*len(nodes))
}

// waitReadyEndpoints waits until svc has want Ready endpoints in the
// EndpointSlice of each of its families.
func waitReadyEndpoints(t *testing.T, c client.Client, svc *corev1.Service, want int) {
	t.Helper()
	waitFor(t, svc.Name+"'s endpoints", func() (bool, string) {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(context.Background(), &slices, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
			return false, err.Error()
		}
		ready := map[discoveryv1.AddressType]int{}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready[s.AddressType]++
				}
			}
		}
		for _, f := range svc.Spec.IPFamilies {
			if ready[discoveryv1.AddressType(f)] != want {
				return false, fmt.Sprint(ready)
			}
		}
		return true, ""
	})
}

// answerers sends n requests to url from namespace ns, once the first
// is answered, and returns the distinct answers.
func answerers(t *testing.T, ns, url string, n int) []string {
	t.Helper()
	var first string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := fromClient(ctx, ns, url)
		first = body
		return err == nil, nil
	}); err != nil {
		t.Fatalf("%s from %s: never answered", url, ns)
	}
	seen := map[string]bool{first: true}
	for i := 1; i < n; i++ {
		body, err := fromClient(context.Background(), ns, url)
		if err != nil {
			t.Fatalf("request %d to %s from %s: %v", i, url, ns, err)
		}
		seen[body] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// checkLocalAndSourceRanges fetches /clientip over each of svc's
// LoadBalancer addresses (externalTrafficPolicy Local) and wants the
// client's own address of that family, not a node's; then lets in only
// the client's addresses, which still reach it, then only ranges
// without the client, which shut it out.
func checkLocalAndSourceRanges(t *testing.T, c client.Client, svc *corev1.Service, nodes map[string][]string) {
	t.Helper()
	ctx := context.Background()
	ingress := loadBalancerIPs(t, c, svc, svc.Spec.IPFamilies)
	nodeAddrs := map[string]bool{}
	for _, addrs := range nodes {
		for _, a := range addrs {
			nodeAddrs[a] = true
		}
	}
	var clientRanges, otherRanges []string
	for _, ip := range ingress {
		url := "http://" + hostPort(ip, 80) + "/clientip"
		got := answerers(t, "svcnet-client", url, 1)[0]
		ap, err := netip.ParseAddrPort(got)
		if err != nil {
			t.Fatalf("%s answered %q, not an address and port", url, got)
		}
		if f, _ := ipfamily.OfString(ip); ipfamily.Of(ap.Addr()) != f || nodeAddrs[ap.Addr().String()] {
			t.Errorf("externalTrafficPolicy Local %s: the Pod saw the request from %s, want the client's address of the same family", ip, ap.Addr())
		}
		bits, other := 32, "192.0.2.0/24"
		if ap.Addr().Is6() {
			bits, other = 128, "2001:db8::/64"
		}
		clientRanges = append(clientRanges, netip.PrefixFrom(ap.Addr(), bits).String())
		otherRanges = append(otherRanges, other)
	}
	setSourceRanges := func(ranges []string) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.LoadBalancerSourceRanges = ranges
		if err := c.Update(ctx, svc); err != nil {
			t.Fatalf("loadBalancerSourceRanges %v: %v", ranges, err)
		}
	}
	setSourceRanges(clientRanges)
	for _, ip := range ingress {
		answerers(t, "svcnet-client", "http://"+hostPort(ip, 80)+"/hostname", 5)
	}
	setSourceRanges(otherRanges)
	for _, ip := range ingress {
		url := "http://" + hostPort(ip, 80) + "/hostname"
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := fromClient(ctx, "svcnet-client", url)
			return err != nil, nil
		}); err != nil {
			t.Errorf("loadBalancerSourceRanges %v: the client still reaches %s", otherRanges, url)
		}
	}
	if t.Failed() {
		return
	}
	for _, ip := range ingress {
		if body, err := fromClient(ctx, "svcnet-client", "http://"+hostPort(ip, 80)+"/hostname"); err == nil {
			t.Errorf("loadBalancerSourceRanges %v: %s answered the client again (%q)", otherRanges, ip, strings.TrimSpace(body))
		}
	}
}
