// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"fmt"
	"maps"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// addPods creates n more ready Pods labelled app=<app>, numbered from
// first (names and IPs as createPods gives them), and returns their IPs.
func addPods(ctx context.Context, ns, app string, first, n int) []string {
	ips := make([]string, n)
	Expect(testenv.Parallel(n, func(i int) error {
		k := first + i
		ips[i] = fmt.Sprintf("10.%d.%d.%d", 100+k/65536, (k/256)%256, k%256)
		return env.CreatePod(ctx, builder.Pod(fmt.Sprintf("%s-%d", app, k), ns).Label("app", app).ContainerPort("http", 8080).IP(ips[i]).Ready().Obj())
	})).To(Succeed())
	return ips
}

// uidsOf returns the UIDs of slices.
func uidsOf(slices []discoveryv1.EndpointSlice) []types.UID {
	var out []types.UID
	for _, s := range slices {
		out = append(out, s.UID)
	}
	return out
}

// deleteSlicesOf deletes every slice of a Service, as
// `kubectl delete endpointslices -l kubernetes.io/service-name=<svc>` does,
// and returns the UIDs deleted.
func deleteSlicesOf(ctx context.Context, ns, svc string) []types.UID {
	var list discoveryv1.EndpointSliceList
	Expect(env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc})).To(Succeed())
	Expect(list.Items).NotTo(BeEmpty())
	for i := range list.Items {
		Expect(env.Client.Delete(ctx, &list.Items[i])).To(Succeed())
	}
	return uidsOf(list.Items)
}

var _ = Describe("EndpointSlice repair", func() {
	var ctx context.Context
	var ns string
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	// Issue 35: the slice tracker took a slice someone else deleted for one
	// the cache had not shown yet, and the Service waited forever.
	It("recreates slices someone else deleted, with the same endpoints, and keeps following Pods", func() {
		ips := createPods(ctx, ns, "web", 3, nil)
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf(ips))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		gone := deleteSlicesOf(ctx, ns, "web")
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(uidsOf(got)).NotTo(ContainElements(gone))
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())

		// Deleted again, then the Pods change before the repair is seen.
		deleteSlicesOf(ctx, ns, "web")
		ips = append(ips, addPods(ctx, ns, "web", 3, 2)...)
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf(ips))
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
		Expect(env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-4"}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf(ips[:4]))
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
	})

	It("puts back endpoints, labels and owner someone else edited", func() {
		ips := createPods(ctx, ns, "web", 2, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		var s discoveryv1.EndpointSlice
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			s = got[0]
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		want := s.DeepCopy()

		s.Endpoints = s.Endpoints[:1]
		s.Labels = maps.Clone(s.Labels)
		delete(s.Labels, "team")
		s.OwnerReferences = nil
		Expect(env.Client.Update(ctx, &s)).To(Succeed())
		Eventually(func(g Gomega) {
			var now discoveryv1.EndpointSlice
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&s), &now)).To(Succeed())
			g.Expect(now.Labels).To(Equal(want.Labels))
			g.Expect(now.OwnerReferences).To(Equal(want.OwnerReferences))
			g.Expect(addresses([]discoveryv1.EndpointSlice{now}, true)).To(ConsistOf(ips))
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
	})

	It("publishes anew what a slice taken over by another manager held, and leaves that slice alone", func() {
		ips := createPods(ctx, ns, "web", 2, nil)
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		var s discoveryv1.EndpointSlice
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			s = got[0]
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		s.Labels[discoveryv1.LabelManagedBy] = "someone-else.example.com"
		Expect(env.Client.Update(ctx, &s)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(uidsOf(got)).NotTo(ContainElement(s.UID))
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			var now discoveryv1.EndpointSlice
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&s), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(s.ResourceVersion))
		}).WithTimeout(quiet).WithPolling(poll).Should(Succeed())

		// Renamed to another Service: web publishes anew, and the slice,
		// still labelled for this controller, belongs to the Service it names.
		var mine discoveryv1.EndpointSlice
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			mine = got[0]
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
		mine.Labels[discoveryv1.LabelServiceName] = "api"
		Expect(env.Client.Update(ctx, &mine)).To(Succeed())
		apiIPs := addPods(ctx, ns, "api", 10, 1)
		api := builder.Service("api", ns).Port("http", 80, webService(ns).Spec.Ports[0].TargetPort).Selector("app", "api").Obj()
		Expect(env.Client.Create(ctx, api)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf(ips))
			g.Expect(addresses(slicesOf(g, ctx, ns, "api"), true)).To(ConsistOf(apiIPs))
			for _, s := range slicesOf(g, ctx, ns, "api") {
				g.Expect(metav1.GetControllerOf(&s).UID).To(Equal(api.UID))
			}
		}).WithTimeout(repairTimeout).WithPolling(poll).Should(Succeed())
	})

	It("leaves slices of other managers alone", func() {
		createPods(ctx, ns, "web", 1, nil)
		foreign := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "web-by-hand", Namespace: ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "by-hand.example.com",
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
		}
		Expect(env.Client.Create(ctx, foreign)).To(Succeed())
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			var now discoveryv1.EndpointSlice
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(foreign.ResourceVersion))
		}).WithTimeout(quiet).WithPolling(poll).Should(Succeed())
	})
})
