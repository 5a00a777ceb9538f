// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
)

// testHeadlessLabelledSlice is upstream's e2e "Services should implement
// service.kubernetes.io/headless" on the kernel cluster: a Service whose
// hand-written EndpointSlice gains the label loses its endpoints, as
// kube-proxy's informer stops seeing the slice.
func testHeadlessLabelledSlice(t *testing.T, c *cluster, newNS func(*testing.T) string, clientPodOn func(*testing.T, *netlab.Node) *netlab.Pod) {
	ctx := context.Background()
	g := NewWithT(t)
	ns := newNS(t)
	server := c.addPods(t, ns, "unselected", c.nodes[1], 1)[0]
	svc := c.service(t, builder.Service("custom", ns).Port("port80", 80, intstr.FromInt32(podPort)).Obj())
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "kernel-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{server.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("port80"), Port: ptr.To[int32](podPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	g.Expect(c.env.Client.Create(ctx, slice)).To(Succeed())
	url := "http://" + svc.Spec.ClusterIP + ":80/"
	hc := netlab.Client(clientPodOn(t, c.nodes[0]).NetNS, 2*time.Second)
	g.Eventually(func() (string, error) { return netlab.Get(ctx, hc, url) }).
		WithTimeout(converge).WithPolling(poll).Should(HavePrefix(server.Name + " "))

	slice.Labels[corev1.IsHeadlessService] = ""
	g.Expect(c.env.Client.Update(ctx, slice)).To(Succeed())
	g.Eventually(func() error { _, err := netlab.Get(ctx, hc, url); return err }).
		WithTimeout(converge).WithPolling(poll).Should(MatchError(ContainSubstring("connection refused")))
}
