// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/test/builder"
)

// readyNode creates a Ready Node in zone with cpu allocatable, deleted when
// the test ends.
func readyNode(ctx context.Context, zone, cpu string, labels map[string]string) *corev1.Node {
	GinkgoHelper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-", Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
	for k, v := range labels {
		node.Labels[k] = v
	}
	Expect(env.Client.Create(ctx, node)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(env.Client.Delete(context.Background(), node))).To(Succeed()) })
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	node.Status.Capacity = node.Status.Allocatable
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	Expect(env.Client.Status().Update(ctx, node)).To(Succeed())
	return node
}

// hintedZones returns the zone hints of the ready endpoints of a Service's
// slices, by Pod IP ("" for none).
func hintedZones(g Gomega, ctx context.Context, ns string) map[string]string {
	out := map[string]string{}
	for _, s := range slicesOf(g, ctx, ns, "web") {
		for _, ep := range s.Endpoints {
			z := ""
			if ep.Hints != nil {
				for _, f := range ep.Hints.ForZones {
					z += f.Name
				}
			}
			out[ep.Addresses[0]] = z
		}
	}
	return out
}

var _ = Describe("Topology-aware routing (topology-mode: Auto)", func() {
	It("writes hints as kube-controller-manager does: none under overload, with its Events", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// Half the CPU in zone-a, a quarter in each of the others; the
		// control-plane Node would tip the shares if it counted.
		a := readyNode(ctx, "zone-a", "2", nil)
		b := readyNode(ctx, "zone-b", "1", nil)
		c := readyNode(ctx, "zone-c", "1", nil)
		readyNode(ctx, "zone-c", "8", map[string]string{"node-role.kubernetes.io/control-plane": ""})
		onNodes := func(nodes ...*corev1.Node) func(int, *builder.PodBuilder) {
			return func(i int, b *builder.PodBuilder) { b.Node(nodes[i%len(nodes)].Name) }
		}
		createPods(ctx, ns, "web", 3, onNodes(a, b, c))
		svc := webService(ns)
		svc.Annotations = map[string]string{corev1.AnnotationTopologyMode: "Auto"}
		// trafficDistribution loses to the annotation, as upstream.
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())

		By("three endpoints over 50/25/25 % of the CPU would overload zone-a's one: no hints")
		events := func(reason string) func() ([]string, error) {
			return func() ([]string, error) {
				evs, err := env.Events(ctx, endpointslice.ReportingController, svc.UID, reason)
				var notes []string
				for _, ev := range evs {
					notes = append(notes, ev.Type+": "+ev.Note)
				}
				return notes, err
			}
		}
		Eventually(events(endpointslice.ReasonTopologyAwareHintsDisabled)).WithTimeout(timeout).WithPolling(poll).Should(ContainElement(
			"Warning: Unable to allocate minimum required endpoints to each zone without exceeding overload threshold (3 endpoints, 3 zones), addressType: IPv4"))
		Eventually(func(g Gomega) {
			g.Expect(hintedZones(g, ctx, ns)).To(Equal(map[string]string{"10.100.0.0": "", "10.100.0.1": "", "10.100.0.2": ""}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		By("eight endpoints, all in zone-a, spread 4/2/2")
		more := createPodsFrom(ctx, ns, 3, 5, onNodes(a))
		Eventually(events(endpointslice.ReasonTopologyAwareHintsEnabled)).WithTimeout(timeout).WithPolling(poll).Should(ContainElement(
			"Normal: Topology Aware Hints has been enabled, addressType: IPv4"))
		Eventually(func(g Gomega) {
			perZone := map[string]int{}
			for _, z := range hintedZones(g, ctx, ns) {
				perZone[z]++
			}
			// The three first Pods are in zones a, b, c; the five new ones
			// in a: a has 6 of 8 and gives one each to b and c.
			g.Expect(perZone).To(Equal(map[string]int{"zone-a": 4, "zone-b": 2, "zone-c": 2}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(more).To(HaveLen(5))

		By("without the annotation, trafficDistribution decides again, and the Event says hints are off")
		Eventually(func() error {
			var cur corev1.Service
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &cur); err != nil {
				return err
			}
			cur.Annotations = nil
			return env.Client.Update(ctx, &cur)
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Eventually(events(endpointslice.ReasonTopologyAwareHintsDisabled)).WithTimeout(timeout).WithPolling(poll).Should(ContainElement(
			"Warning: Topology Aware Hints has been disabled, addressType: IPv4"))
		Eventually(func(g Gomega) {
			got := hintedZones(g, ctx, ns)
			g.Expect(got).To(HaveLen(8))
			g.Expect(got["10.100.0.1"]).To(Equal("zone-b"), "PreferClose: own zone")
			g.Expect(got["10.100.0.3"]).To(Equal("zone-a"))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
})

// createPodsFrom creates n ready Pods labelled app=web numbered from first.
func createPodsFrom(ctx context.Context, ns string, first, n int, mutate func(i int, b *builder.PodBuilder)) []string {
	GinkgoHelper()
	var ips []string
	for i := first; i < first+n; i++ {
		ip := fmt.Sprintf("10.100.0.%d", i)
		b := builder.Pod(fmt.Sprintf("web-%d", i), ns).Label("app", "web").ContainerPort("http", 8080).IP(ip).Ready()
		if mutate != nil {
			mutate(i, b)
		}
		Expect(env.CreatePod(ctx, b.Obj())).To(Succeed())
		ips = append(ips, ip)
	}
	return ips
}
