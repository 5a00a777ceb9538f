// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/builder"
)

// allSlicesOf lists every slice labelled for a Service, whoever manages
// it, as upstream's e2e tests list them.
func allSlicesOf(g Gomega, ctx context.Context, ns, svc string) []discoveryv1.EndpointSlice {
	var list discoveryv1.EndpointSliceList
	g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc})).To(Succeed())
	return list.Items
}

// What upstream's conformance tests of the EndpointSlice controller
// (test/e2e/network/endpointslice.go, v1.37.1) assert, against svcnet's.
var _ = Describe("EndpointSlice controller, as upstream's conformance suite checks it", func() {
	var ctx context.Context
	var ns string
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("creates and deletes an empty slice, managed by endpointslice-controller.k8s.io, for a selector that matches no Pods", func() {
		svc := builder.Service("example-empty-selector", ns).Port("example", 80, intstr.FromInt32(80)).
			Selector("does-not-match-anything", "endpoints-and-endpoint-slices-should-still-be-created").Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := allSlicesOf(g, ctx, ns, svc.Name)
			g.Expect(got).NotTo(BeEmpty())
			g.Expect(got[0].Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, "endpointslice-controller.k8s.io"))
			g.Expect(got[0].Endpoints).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(allSlicesOf(g, ctx, ns, svc.Name)).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("publishes Pods matching a Service by named port, and recreates the slices after they are deleted", func() {
		pod1 := builder.Pod("pod1", ns).Label("pod1", "on").Label("shared12", "on").ContainerPort("example-name", 3000).IP("10.100.0.1").Obj()
		pod2 := builder.Pod("pod2", ns).Label("pod2", "on").Label("shared12", "on").
			ContainerPort("example-name", 3001).ContainerPort("other-port", 3002).IP("10.100.0.2").Obj()
		for _, p := range []*corev1.Pod{pod1, pod2} {
			Expect(env.CreatePod(ctx, p)).To(Succeed())
		}
		svc1 := builder.Service("example-int-port", ns).Port("example", 80, intstr.FromInt32(3000)).Selector("pod1", "on").PublishNotReady().Obj()
		svc2 := builder.Service("example-named-port", ns).Port("http", 80, intstr.FromString("example-name")).Selector("shared12", "on").PublishNotReady().Obj()
		Expect(env.Client.Create(ctx, svc1)).To(Succeed())
		Expect(env.Client.Create(ctx, svc2)).To(Succeed())
		// expectEndpointSlices: at least numSlices slices, every Pod's
		// address, targetRef to the Pod, ports as the Service's.
		expect := func(svc *corev1.Service, pods []*corev1.Pod, numSlices int) func(Gomega) {
			return func(g Gomega) {
				got := allSlicesOf(g, ctx, ns, svc.Name)
				g.Expect(len(got)).To(BeNumerically(">=", numSlices))
				byIP := map[string]*corev1.Pod{}
				for _, p := range pods {
					byIP[p.Status.PodIP] = p
				}
				seen := map[string]bool{}
				for _, s := range got {
					g.Expect(s.Ports).To(HaveLen(len(svc.Spec.Ports)))
					g.Expect(*s.Ports[0].Name).To(Equal(svc.Spec.Ports[0].Name))
					for _, ep := range s.Endpoints {
						p, ok := byIP[ep.Addresses[0]]
						g.Expect(ok).To(BeTrue(), "unexpected address %s", ep.Addresses[0])
						g.Expect(ep.TargetRef).NotTo(BeNil())
						g.Expect(ep.TargetRef.Kind).To(Equal("Pod"))
						g.Expect(ep.TargetRef.Name).To(Equal(p.Name))
						g.Expect(ep.TargetRef.UID).To(Equal(p.UID))
						g.Expect(*s.Ports[0].Port).To(Equal(p.Spec.Containers[0].Ports[0].ContainerPort))
						seen[ep.Addresses[0]] = true
					}
				}
				g.Expect(seen).To(HaveLen(len(pods)))
			}
		}
		Eventually(expect(svc1, []*corev1.Pod{pod1}, 1)).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Eventually(expect(svc2, []*corev1.Pod{pod1, pod2}, 2)).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		// deleteEndpointSlices, then expectEndpointSlices again (2 minutes
		// upstream; svcnet repairs within seconds).
		deleteSlicesOf(ctx, ns, svc2.Name)
		Eventually(expect(svc2, []*corev1.Pod{pod1, pod2}, 2)).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
	})

	// The DNS tests resolve <hostname>.<subdomain> through the slices of a
	// headless Service named like the Pods' subdomain.
	It("carries the hostname of Pods whose subdomain is the headless Service", func() {
		svc := builder.Service("dns-test", ns).Port("http", 80, intstr.FromInt32(8080)).Selector("app", "dns").Headless().Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		named := builder.Pod("named", ns).Label("app", "dns").Hostname("host-a", "dns-test").IP("10.100.1.1").Ready().Obj()
		other := builder.Pod("other", ns).Label("app", "dns").Hostname("host-b", "elsewhere").IP("10.100.1.2").Ready().Obj()
		plain := builder.Pod("plain", ns).Label("app", "dns").IP("10.100.1.3").Ready().Obj()
		for _, p := range []*corev1.Pod{named, other, plain} {
			Expect(env.CreatePod(ctx, p)).To(Succeed())
		}
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, svc.Name)
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].Labels).To(HaveKeyWithValue(corev1.IsHeadlessService, ""))
			hostnames := map[string]string{}
			for _, ep := range got[0].Endpoints {
				hostnames[ep.Addresses[0]] = ptr.Deref(ep.Hostname, "")
			}
			g.Expect(hostnames).To(Equal(map[string]string{"10.100.1.1": "host-a", "10.100.1.2": "", "10.100.1.3": ""}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
})
