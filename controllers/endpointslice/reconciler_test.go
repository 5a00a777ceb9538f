// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"fmt"
	"slices"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const holdFinalizer = "test.svcnet.io/hold"

// slicesOf lists the EndpointSlices of a Service managed by svcnet.
func slicesOf(g Gomega, ctx context.Context, ns, svc string) []discoveryv1.EndpointSlice {
	var list discoveryv1.EndpointSliceList
	g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
		discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: endpointslice.ManagedBy,
	})).To(Succeed())
	return list.Items
}

// addresses returns the addresses published in slices, by readiness.
func addresses(slices []discoveryv1.EndpointSlice, onlyReady bool) []string {
	var out []string
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if onlyReady && !ptr.Deref(ep.Conditions.Ready, false) {
				continue
			}
			out = append(out, ep.Addresses...)
		}
	}
	return out
}

// createPods creates n ready Pods labelled app=<app>, with IPs from base.
func createPods(ctx context.Context, ns, app string, n int, mutate func(i int, b *builder.PodBuilder)) []string {
	ips := make([]string, n)
	err := testenv.Parallel(n, func(i int) error {
		ip := fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)
		b := builder.Pod(fmt.Sprintf("%s-%d", app, i), ns).Label("app", app).ContainerPort("http", 8080).IP(ip).Ready()
		if mutate != nil {
			mutate(i, b)
		}
		ips[i] = ip
		return env.CreatePod(ctx, b.Obj())
	})
	Expect(err).NotTo(HaveOccurred())
	return ips
}

func webService(ns string) *corev1.Service {
	return builder.Service("web", ns).Port("http", 80, intstr.FromString("http")).Selector("app", "web").Label("team", "a").Obj()
}

var _ = Describe("EndpointSlice controller", func() {
	var ctx context.Context
	var ns string
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("publishes 3 ready Pods in one slice with the standard labels and owner", func() {
		ips := createPods(ctx, ns, "web", 3, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			s := got[0]
			g.Expect(addresses(got, true)).To(ConsistOf(ips))
			g.Expect(s.AddressType).To(Equal(discoveryv1.AddressTypeIPv4))
			g.Expect(s.GenerateName).To(Equal("web-"))
			g.Expect(s.Labels).To(Equal(map[string]string{
				"team": "a", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpointslice.ManagedBy,
			}))
			g.Expect(s.OwnerReferences).To(ConsistOf(metav1.OwnerReference{
				APIVersion: "v1", Kind: "Service", Name: "web", UID: svc.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}))
			g.Expect(s.Annotations).To(HaveKey(corev1.EndpointsLastChangeTriggerTime))
			g.Expect(s.Ports).To(ConsistOf(discoveryv1.EndpointPort{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("keeps one empty placeholder slice for a Service without Pods", func() {
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].Endpoints).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(slicesOf(g, ctx, ns, "web")).To(HaveLen(1))
		}).WithTimeout(quiet).WithPolling(poll).Should(Succeed())
	})

	DescribeTable("splits endpoints into slices of at most 100",
		func(pods, wantSlices int) {
			ips := createPods(ctx, ns, "web", pods, nil)
			Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
			Eventually(func(g Gomega) {
				got := slicesOf(g, ctx, ns, "web")
				// Sorted comparison: ConsistOf is quadratic on thousands.
				g.Expect(slices.Sorted(slices.Values(addresses(got, true)))).To(Equal(slices.Sorted(slices.Values(ips))))
				g.Expect(got).To(HaveLen(wantSlices))
				for _, s := range got {
					g.Expect(len(s.Endpoints)).To(BeNumerically("<=", 100))
				}
			}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		},
		Entry("250 Pods: 3 slices", 250, 3),
		Entry("3,000 Pods: 30 slices", 3000, 30),
	)

	It("follows readiness flips", func() {
		createPods(ctx, ns, "web", 2, nil)
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		pod := &corev1.Pod{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-0"}, pod)).To(Succeed())
		pod.Status.Conditions[0].Status = corev1.ConditionFalse
		Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, false)).To(HaveLen(2))
			g.Expect(addresses(got, true)).To(ConsistOf("10.100.0.1"))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		pod.Status.Conditions[0].Status = corev1.ConditionTrue
		Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("lists terminating Pods as serving, not ready, until they are gone", func() {
		createPods(ctx, ns, "web", 2, func(i int, b *builder.PodBuilder) {
			if i == 0 {
				b.Finalizer(holdFinalizer)
			}
		})
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"}}
		Expect(env.Client.Delete(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			var ep *discoveryv1.Endpoint
			for _, s := range slicesOf(g, ctx, ns, "web") {
				for i := range s.Endpoints {
					if s.Endpoints[i].TargetRef.Name == "web-0" {
						ep = &s.Endpoints[i]
					}
				}
			}
			g.Expect(ep).NotTo(BeNil())
			g.Expect(ep.Conditions).To(Equal(discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		pod.Finalizers = nil
		Expect(env.Client.Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), false)).To(ConsistOf("10.100.0.1"))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("puts Pods whose named port resolves to different numbers in different slices", func() {
		createPods(ctx, ns, "web", 4, func(i int, b *builder.PodBuilder) {
			if i%2 == 1 {
				*b = *builder.Pod(fmt.Sprintf("web-%d", i), ns).Label("app", "web").ContainerPort("http", 9090).IP(fmt.Sprintf("10.100.0.%d", i)).Ready()
			}
		})
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(2))
			byPort := map[int32]int{}
			for _, s := range got {
				g.Expect(s.Ports).To(HaveLen(1))
				byPort[*s.Ports[0].Port] = len(s.Endpoints)
			}
			g.Expect(byPort).To(Equal(map[int32]int{8080: 2, 9090: 2}))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("writes one slice set per family of a dual-stack Service and drops a family that goes", func() {
		createPods(ctx, ns, "web", 3, func(i int, b *builder.PodBuilder) {
			b.IP(fmt.Sprintf("10.100.0.%d", i), fmt.Sprintf("fd00:100::%d", i+1))
		})
		svc := webService(ns)
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			types := map[discoveryv1.AddressType][]string{}
			for _, s := range got {
				types[s.AddressType] = append(types[s.AddressType], addresses([]discoveryv1.EndpointSlice{s}, true)...)
			}
			g.Expect(types[discoveryv1.AddressTypeIPv4]).To(ConsistOf("10.100.0.0", "10.100.0.1", "10.100.0.2"))
			g.Expect(types[discoveryv1.AddressTypeIPv6]).To(ConsistOf("fd00:100::1", "fd00:100::2", "fd00:100::3"))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		svc.Spec.IPFamilies = svc.Spec.IPFamilies[:1]
		svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].AddressType).To(Equal(discoveryv1.AddressTypeIPv4))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("labels the slices of a headless Service", func() {
		createPods(ctx, ns, "web", 2, nil)
		svc := webService(ns)
		svc.Spec.ClusterIP = corev1.ClusterIPNone
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].Labels).To(HaveKeyWithValue(corev1.IsHeadlessService, ""))
			g.Expect(addresses(got, true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("writes no slices for an ExternalName Service, and removes them on a type change", func() {
		createPods(ctx, ns, "web", 2, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.Type = corev1.ServiceTypeExternalName
		svc.Spec.ExternalName = "example.com"
		svc.Spec.ClusterIP = ""
		svc.Spec.ClusterIPs = nil
		svc.Spec.IPFamilies = nil
		svc.Spec.IPFamilyPolicy = nil
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(slicesOf(g, ctx, ns, "web")).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		ext := builder.Service("ext", ns).ExternalName("example.org").Selector("app", "web").Obj()
		Expect(env.Client.Create(ctx, ext)).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(slicesOf(g, ctx, ns, "ext")).To(BeEmpty())
		}).WithTimeout(quiet).WithPolling(poll).Should(Succeed())
	})

	It("follows a selector change", func() {
		createPods(ctx, ns, "web", 2, nil)
		apiIPs := createPods(ctx, ns, "api", 3, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.Selector = map[string]string{"app": "api"}
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf(apiIPs))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("deletes its slices when the Service goes, even without a garbage collector", func() {
		createPods(ctx, ns, "web", 150, nil)
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(slicesOf(g, ctx, ns, "web")).To(HaveLen(2))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(slicesOf(g, ctx, ns, "web")).To(BeEmpty())
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("returns to ceil(n/100)+1 slices after a scale-down", func() {
		createPods(ctx, ns, "web", 1000, nil)
		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(1000))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		// Keep 150 Pods spread over every slice, the way a ReplicaSet
		// scale-down picks them.
		for i := range 1000 {
			if i%20 < 3 {
				continue
			}
			Expect(env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("web-%d", i)}})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(addresses(got, true)).To(HaveLen(150))
			g.Expect(len(got)).To(BeNumerically("<=", 3))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	It("sets zone hints for trafficDistribution PreferClose", func() {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}
		Expect(env.Client.Create(ctx, node)).To(Succeed())
		DeferCleanup(func() { Expect(env.Client.Delete(context.Background(), node)).To(Succeed()) })
		createPods(ctx, ns, "web", 2, func(_ int, b *builder.PodBuilder) { b.Node(node.Name) })
		svc := webService(ns)
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].Endpoints).To(HaveLen(2))
			for _, ep := range got[0].Endpoints {
				g.Expect(ep.Zone).To(Equal(ptr.To("zone-a")))
				g.Expect(ep.NodeName).To(Equal(ptr.To(node.Name)))
				g.Expect(ep.Hints).To(Equal(&discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}))
			}
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})

	DescribeTable("adopts the slices kube-controller-manager or an older svcnet wrote in place, never publishing fewer ready endpoints", func(managedBy string) {
		// As at a real takeover, the slices exist when the controller
		// starts: its first list holds them.
		env.StopManager()
		ips := createPods(ctx, ns, "web", 3, nil)
		var upstreamEPs []discoveryv1.Endpoint
		for _, ip := range ips {
			upstreamEPs = append(upstreamEPs, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		upstream := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: ns, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: managedBy,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   upstreamEPs,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		Expect(env.Client.Create(ctx, upstream)).To(Succeed())

		// Watch every slice of the Service from here on and record the
		// fewest distinct ready addresses published at any moment.
		var list discoveryv1.EndpointSliceList
		w, err := env.WatchClient().Watch(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})
		Expect(err).NotTo(HaveOccurred())
		defer w.Stop()
		current := map[string]discoveryv1.EndpointSlice{}
		minReady := len(ips)
		done := make(chan struct{})
		var mu sync.Mutex
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for ev := range w.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok {
					continue
				}
				mu.Lock()
				if ev.Type == watch.Deleted {
					delete(current, s.Name)
				} else {
					current[s.Name] = *s
				}
				ready := slices.Compact(slices.Sorted(slices.Values(addresses(slices.Collect(mapValues(current)), true))))
				minReady = min(minReady, len(ready))
				mu.Unlock()
			}
		}()

		Expect(env.Client.Create(ctx, webService(ns))).To(Succeed())
		Expect(env.RestartManager()).To(Succeed())
		Eventually(func(g Gomega) {
			var all discoveryv1.EndpointSliceList
			g.Expect(env.Client.List(ctx, &all, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})).To(Succeed())
			g.Expect(all.Items).To(HaveLen(1))
			g.Expect(all.Items[0].UID).To(Equal(upstream.UID), "adopted in place")
			g.Expect(all.Items[0].Labels[discoveryv1.LabelManagedBy]).To(Equal(endpointslice.ManagedBy))
			g.Expect(metav1.GetControllerOf(&all.Items[0])).NotTo(BeNil())
			g.Expect(addresses(all.Items, true)).To(ConsistOf(ips))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		Expect(minReady).To(Equal(len(ips)), "ready endpoints dipped during the takeover")
	},
		Entry("kube-controller-manager's", endpointslice.ManagedBy),
		Entry("an older svcnet's", endpointslice.LegacyManagedBy),
	)
})

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
