// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers/endpointslicemirroring"
	"github.com/svcnet-io/svcnet/test/builder"
)

func newNS(ctx context.Context) string {
	ns, err := env.Namespace(ctx, "mirror")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// selectorless creates a Service without a selector.
func selectorless(ctx context.Context, ns, name string) *corev1.Service {
	svc := builder.Service(name, ns).Port("pg", 5432, intstr.FromInt32(5432)).Obj()
	Expect(env.Client.Create(ctx, svc)).To(Succeed())
	return svc
}

func endpoints(ns, name string, ready, notReady []string, port int32) *corev1.Endpoints {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "db"}}}
	sub := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "pg", Port: port}}}
	for _, ip := range ready {
		sub.Addresses = append(sub.Addresses, corev1.EndpointAddress{IP: ip})
	}
	for _, ip := range notReady {
		sub.NotReadyAddresses = append(sub.NotReadyAddresses, corev1.EndpointAddress{IP: ip})
	}
	ep.Subsets = []corev1.EndpointSubset{sub}
	return ep
}

func mirrored(ctx context.Context, ns, name string) func() ([]discoveryv1.EndpointSlice, error) {
	return func() ([]discoveryv1.EndpointSlice, error) {
		var list discoveryv1.EndpointSliceList
		err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
		return list.Items, err
	}
}

// addresses lists "ip ready" of every endpoint of the slices.
func addresses(ss []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, e := range s.Endpoints {
			out = append(out, fmt.Sprintf("%s %t", e.Addresses[0], ptr.Deref(e.Conditions.Ready, false)))
		}
	}
	slices.Sort(out)
	return out
}

var _ = Describe("mirroring Endpoints of a Service without a selector", func() {
	It("mirrors addresses, ports and labels, follows updates and stops when told", func(ctx SpecContext) {
		ns := newNS(ctx)
		selectorless(ctx, ns, "db")
		ep := endpoints(ns, "db", []string{"192.0.2.10", "192.0.2.11"}, []string{"192.0.2.12"}, 5432)
		Expect(env.Client.Create(ctx, ep)).To(Succeed())

		Eventually(func(g Gomega) {
			ss, err := mirrored(ctx, ns, "db")()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ss).To(HaveLen(1))
			s := ss[0]
			g.Expect(s.Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, endpointslicemirroring.ManagedBy))
			g.Expect(s.Labels).To(HaveKeyWithValue("team", "db"))
			g.Expect(s.AddressType).To(Equal(discoveryv1.AddressTypeIPv4))
			g.Expect(s.Ports).To(HaveLen(1))
			g.Expect(*s.Ports[0].Name).To(Equal("pg"))
			g.Expect(*s.Ports[0].Port).To(BeEquivalentTo(5432))
			g.Expect(s.OwnerReferences).To(HaveLen(1))
			g.Expect(s.OwnerReferences[0].Kind).To(Equal("Endpoints"))
			g.Expect(addresses(ss)).To(Equal([]string{"192.0.2.10 true", "192.0.2.11 true", "192.0.2.12 false"}))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("an update of the Endpoints reaches the slice")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
		ep.Subsets[0].Addresses = ep.Subsets[0].Addresses[:1]
		ep.Subsets[0].NotReadyAddresses = nil
		Expect(env.Client.Update(ctx, ep)).To(Succeed())
		Eventually(func() ([]string, error) {
			ss, err := mirrored(ctx, ns, "db")()
			return addresses(ss), err
		}).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.0.2.10 true"}))

		By("the skip-mirror label removes the slice")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
		ep.Labels[discoveryv1.LabelSkipMirror] = "true"
		Expect(env.Client.Update(ctx, ep)).To(Succeed())
		Eventually(mirrored(ctx, ns, "db")).WithTimeout(timeout).WithPolling(interval).Should(BeEmpty())

		By("without it again, and then deleted, the Endpoints' slice comes and goes")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ep), ep)).To(Succeed())
		delete(ep.Labels, discoveryv1.LabelSkipMirror)
		Expect(env.Client.Update(ctx, ep)).To(Succeed())
		Eventually(mirrored(ctx, ns, "db")).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(1))
		Expect(env.Client.Delete(ctx, ep)).To(Succeed())
		Eventually(mirrored(ctx, ns, "db")).WithTimeout(timeout).WithPolling(interval).Should(BeEmpty())
	})

	It("leaves Services with a selector, and stops when a Service gets one", func(ctx SpecContext) {
		ns := newNS(ctx)
		withSelector := builder.Service("web", ns).Port("pg", 5432, intstr.FromInt32(5432)).Selector("app", "web").Obj()
		Expect(env.Client.Create(ctx, withSelector)).To(Succeed())
		Expect(env.Client.Create(ctx, endpoints(ns, "web", []string{"192.0.2.20"}, nil, 5432))).To(Succeed())
		svc := selectorless(ctx, ns, "db")
		Expect(env.Client.Create(ctx, endpoints(ns, "db", []string{"192.0.2.21"}, nil, 5432))).To(Succeed())
		Eventually(mirrored(ctx, ns, "db")).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(1))
		Consistently(mirrored(ctx, ns, "web")).WithTimeout(time.Second).WithPolling(interval).Should(BeEmpty())

		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Spec.Selector = map[string]string{"app": "db"}
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Eventually(mirrored(ctx, ns, "db")).WithTimeout(timeout).WithPolling(interval).Should(BeEmpty())
	})

	It("mirrors at most the limit per subset, says so in an Event, and never writes to the Endpoints", func(ctx SpecContext) {
		ns := newNS(ctx)
		selectorless(ctx, ns, "big")
		var ips []string
		for i := range 60 {
			ips = append(ips, fmt.Sprintf("192.0.2.%d", 100+i))
		}
		ep := endpoints(ns, "big", ips, nil, 5432)
		Expect(env.Client.Create(ctx, ep)).To(Succeed())
		created := ep.ResourceVersion
		Eventually(func() ([]string, error) {
			ss, err := mirrored(ctx, ns, "big")()
			return addresses(ss), err
		}).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(50))
		Eventually(func() ([]string, error) {
			var notes []string
			evs, err := env.Events(ctx, endpointslicemirroring.ReportingController, ep.UID, endpointslicemirroring.ReasonTooManyAddressesToMirror)
			for _, ev := range evs {
				notes = append(notes, ev.Note)
			}
			return notes, err
		}).WithTimeout(timeout).WithPolling(interval).Should(ContainElement(
			"A max of 50 addresses can be mirrored to EndpointSlices per Endpoints subset. 10 addresses were skipped"))

		By("the hand-written Endpoints stay as written: no over-capacity annotation, no write at all")
		Consistently(func(g Gomega) {
			var got corev1.Endpoints
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(ep), &got)).To(Succeed())
			g.Expect(got.Annotations).NotTo(HaveKey(corev1.EndpointsOverCapacity))
			g.Expect(got.ResourceVersion).To(Equal(created))
		}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Succeed())
	})

	DescribeTable("adopts the mirrored slices kube-controller-manager or an older svcnet wrote, in place",
		func(ctx SpecContext, managedBy string) {
			ns := newNS(ctx)
			// As at a real takeover, the slices exist when the controller
			// starts: its first list holds them.
			env.StopManager()
			selectorless(ctx, ns, "db")
			theirs := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-kcm", Labels: map[string]string{
					discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: managedBy}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.30"}}},
			}
			Expect(env.Client.Create(ctx, theirs)).To(Succeed())
			Expect(env.Client.Create(ctx, endpoints(ns, "db", []string{"192.0.2.30"}, nil, 5432))).To(Succeed())
			Expect(env.RestartManager()).To(Succeed())
			Eventually(func(g Gomega) {
				ss, err := mirrored(ctx, ns, "db")()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ss).To(HaveLen(1))
				g.Expect(ss[0].UID).To(Equal(theirs.UID), "adopted in place")
				g.Expect(ss[0].Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, endpointslicemirroring.ManagedBy))
				g.Expect(ss[0].Ports).To(HaveLen(1))
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		},
		Entry("kube-controller-manager's", endpointslicemirroring.ManagedBy),
		Entry("an older svcnet's", endpointslicemirroring.LegacyManagedBy),
	)
	It("puts back a mirrored slice someone else deleted or edited, and leaves hand-written slices alone", func(ctx SpecContext) {
		ns := newNS(ctx)
		selectorless(ctx, ns, "db")
		handWritten := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-by-hand", Labels: map[string]string{
				discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: "by-hand.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.99"}}},
		}
		Expect(env.Client.Create(ctx, handWritten)).To(Succeed())
		Expect(env.Client.Create(ctx, endpoints(ns, "db", []string{"192.0.2.40", "192.0.2.41"}, nil, 5432))).To(Succeed())
		ours := func(g Gomega) []discoveryv1.EndpointSlice {
			var list discoveryv1.EndpointSliceList
			g.Expect(env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{
				discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: endpointslicemirroring.ManagedBy})).To(Succeed())
			return list.Items
		}
		want := []string{"192.0.2.40 true", "192.0.2.41 true"}
		var s discoveryv1.EndpointSlice
		Eventually(func(g Gomega) {
			got := ours(g)
			g.Expect(addresses(got)).To(Equal(want))
			s = got[0]
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("deleted: mirrored again")
		Expect(env.Client.Delete(ctx, &s)).To(Succeed())
		Eventually(func(g Gomega) {
			got := ours(g)
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].UID).NotTo(Equal(s.UID))
			g.Expect(addresses(got)).To(Equal(want))
			s = got[0]
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())

		By("endpoints and labels edited: put back")
		s.Endpoints = s.Endpoints[:1]
		delete(s.Labels, "team")
		Expect(env.Client.Update(ctx, &s)).To(Succeed())
		Eventually(func(g Gomega) {
			got := ours(g)
			g.Expect(addresses(got)).To(Equal(want))
			g.Expect(got[0].Labels).To(HaveKeyWithValue("team", "db"))
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())

		Consistently(func(g Gomega) {
			var now discoveryv1.EndpointSlice
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(handWritten), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(handWritten.ResourceVersion))
		}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Succeed())
	})

	// Upstream's conformance test "EndpointSliceMirroring should mirror a
	// custom Endpoints resource through create update and delete", and the
	// Endpoints lifecycle test, whose Endpoints has no Service.
	It("passes upstream's conformance checks of mirroring, and leaves Endpoints without a Service alone", func(ctx SpecContext) {
		ns := newNS(ctx)
		svc := builder.Service("example-custom-endpoints", ns).Port("example", 80, intstr.FromInt32(80)).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		ep := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc.Name},
			Subsets: []corev1.EndpointSubset{{
				Ports: []corev1.EndpointPort{{Port: 80}}, Addresses: []corev1.EndpointAddress{{IP: "10.1.2.3"}},
			}},
		}
		Expect(env.Client.Create(ctx, ep.DeepCopy())).To(Succeed())
		conformant := func(address string) func(g Gomega) {
			return func(g Gomega) {
				ss, err := mirrored(ctx, ns, svc.Name)()
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(ss).To(HaveLen(1))
				g.Expect(ss[0].Ports).To(HaveLen(1))
				g.Expect(*ss[0].Ports[0].Port).To(BeEquivalentTo(80))
				g.Expect(ss[0].Endpoints).To(HaveLen(1))
				g.Expect(ss[0].Endpoints[0].Addresses).To(Equal([]string{address}))
			}
		}
		// The test polls for 12 s.
		Eventually(conformant("10.1.2.3")).WithTimeout(12 * time.Second).WithPolling(interval).Should(Succeed())
		// An unconditional update of the object the test created.
		ep.Subsets[0].Addresses = []corev1.EndpointAddress{{IP: "10.2.3.4"}}
		Expect(env.Client.Update(ctx, ep.DeepCopy())).To(Succeed())
		Eventually(conformant("10.2.3.4")).WithTimeout(12 * time.Second).WithPolling(interval).Should(Succeed())
		Expect(env.Client.Delete(ctx, ep)).To(Succeed())
		Eventually(mirrored(ctx, ns, svc.Name)).WithTimeout(12 * time.Second).WithPolling(interval).Should(BeEmpty())

		lonely := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "testservice", Labels: map[string]string{"test-endpoint-static": "true"}},
			Subsets: []corev1.EndpointSubset{{
				Ports: []corev1.EndpointPort{{Name: "http", Port: 80}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.24"}},
			}},
		}
		Expect(env.Client.Create(ctx, lonely)).To(Succeed())
		Consistently(func(g Gomega) {
			var now corev1.Endpoints
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(lonely), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(lonely.ResourceVersion))
			ss, err := mirrored(ctx, ns, lonely.Name)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ss).To(BeEmpty())
		}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Succeed())
	})
})
