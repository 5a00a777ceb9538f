// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// externalIPs is a range the client routes to node1, for Services'
// externalIPs.
var externalIPs = netip.MustParsePrefix("192.168.78.0/24")

// testLocalPolicyThroughTheAPI is TestLocalPolicyWithoutLocalEndpoint on
// the kernel cluster, from API objects through the agents: the only
// endpoint of an externalTrafficPolicy: Local LoadBalancer Service is on
// node2; a Pod on node1 reaches its load balancer IP (from a pool), node
// port and external IP, and an outside client's connections to node1 are
// dropped.
func testLocalPolicyThroughTheAPI(t *testing.T, c *cluster, newNS func(*testing.T) string, clientPodOn func(*testing.T, *netlab.Node) *netlab.Pod) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNS(t)
	pool := &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "kernel-" + ns},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{lbPool.String()},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
	}
	g.Expect(c.env.Client.Create(ctx, pool)).To(Succeed())
	t.Cleanup(func() { _ = c.env.Client.Delete(context.Background(), pool) })
	node1 := c.nodes[0]
	mustRun(t, c.lab, c.client, "ip", "route", "replace", externalIPs.String(), "via", node1.IP.String())
	t.Cleanup(func() { _, _ = c.lab.Run(c.client, "ip", "route", "del", externalIPs.String()) })
	// A node's default route to its router: what it does not serve is
	// forwarded (and meets the forward hook's rules).
	mustRun(t, c.lab, node1.NetNS, "ip", "route", "replace", "default", "via", clientIP)
	t.Cleanup(func() { _, _ = c.lab.Run(node1.NetNS, "ip", "route", "del", "default") })

	c.addPods(t, ns, "far", c.nodes[1], 1)
	svc := webService(ns, "far")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	extIP := externalIPs.Addr().Next().Next()
	svc.Spec.ExternalIPs = []string{extIP.String()}
	svc = c.service(t, svc)
	g.Eventually(func() ([]corev1.LoadBalancerIngress, error) {
		err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)
		return svc.Status.LoadBalancer.Ingress, err
	}).WithTimeout(converge).WithPolling(poll).Should(HaveLen(1))
	urls := map[string]string{
		"load balancer IP": fmt.Sprintf("http://%s/", svc.Status.LoadBalancer.Ingress[0].IP),
		"node port":        fmt.Sprintf("http://%s:%d/", node1.IP, svc.Spec.Ports[0].NodePort),
		"external IP":      fmt.Sprintf("http://%s/", extIP),
	}
	fromPod := netlab.Client(clientPodOn(t, node1).NetNS, 2*time.Second)
	for what, url := range urls {
		g.Eventually(func() (string, error) { return netlab.Get(ctx, fromPod, url) }).
			WithTimeout(converge).WithPolling(poll).Should(MatchRegexp(`^p\d+ `), "a Pod on node1 to the %s", what)
	}
	outside := netlab.Client(c.client, time.Second)
	for what, url := range urls {
		_, err := netlab.Get(ctx, outside, url)
		g.Expect(timedOut(err)).To(BeTrue(), "an outside client to node1's %s must be dropped, got %v", what, err)
	}
}
