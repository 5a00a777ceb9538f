// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/controllers/servicecidr"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
	"github.com/svcnet-io/svcnet/test/builder"
)

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

func service(name, ns string) *corev1.Service {
	return builder.Service(name, ns).Port("http", 80, intstr.FromInt32(80)).Obj()
}

func ready(ctx context.Context, name string) func(Gomega) {
	return func(g Gomega) {
		sc := &networkingv1.ServiceCIDR{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, sc)).To(Succeed())
		g.Expect(sc.Finalizers).To(ContainElement(servicecidr.Finalizer))
		g.Expect(meta.IsStatusConditionTrue(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)).To(BeTrue())
	}
}

func gone(ctx context.Context, name string) func() error {
	return func() error {
		return env.Client.Get(ctx, client.ObjectKey{Name: name}, &networkingv1.ServiceCIDR{})
	}
}

var _ = Describe("ServiceCIDR controller", Ordered, func() {
	var ns string
	BeforeAll(func(ctx SpecContext) {
		var err error
		ns, err = env.Namespace(ctx, "servicecidr")
		Expect(err).NotTo(HaveOccurred())
	})

	It("puts the finalizer and Ready=True on every ServiceCIDR, the default one too", func(ctx SpecContext) {
		Eventually(ready(ctx, "kubernetes")).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(env.Client.Create(ctx, serviceCIDR("extra", "10.110.0.0/24"))).To(Succeed())
		Eventually(ready(ctx, "extra")).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(env.Client.Delete(ctx, serviceCIDR("extra"))).To(Succeed())
		Eventually(gone(ctx, "extra")).WithTimeout(timeout).WithPolling(interval).Should(Satisfy(apierrors.IsNotFound))
	})

	It("grows the cluster's ranges online: a second ServiceCIDR when the first is full", func(ctx SpecContext) {
		// A /28 has 14 addresses; default/kubernetes holds the first.
		for i := range 13 {
			Expect(env.Client.Create(ctx, service(fmt.Sprintf("fill%d", i), ns))).To(Succeed())
		}
		err := env.Client.Create(ctx, service("overflow", ns))
		Expect(err).To(MatchError(ContainSubstring("failed to allocate a ClusterIP: no free address for IPv4 in ServiceCIDRs kubernetes")))
		kube := &networkingv1.ServiceCIDR{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: "kubernetes"}, kube)).To(Succeed())
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(env.Client.List(ctx, &list)).To(Succeed())
			g.Expect(list.Items).To(ContainElement(And(
				HaveField("Reason", ipaddress.ReasonExhausted),
				HaveField("Regarding.UID", kube.UID),
			)))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		Expect(env.Client.Create(ctx, serviceCIDR("second", "10.120.0.0/24"))).To(Succeed())
		Eventually(ready(ctx, "second")).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		svc := service("overflow", ns)
		Eventually(func() error { return env.Client.Create(ctx, svc) }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(netip.MustParsePrefix("10.120.0.0/24").Contains(netip.MustParseAddr(svc.Spec.ClusterIP))).To(BeTrue(), svc.Spec.ClusterIP)
	})

	It("blocks the deletion of a ServiceCIDR while an address lives only in it, and unblocks it when another covers it", func(ctx SpecContext) {
		Expect(env.Client.Delete(ctx, serviceCIDR("second"))).To(Succeed())
		Eventually(func(g Gomega) {
			sc := &networkingv1.ServiceCIDR{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "second"}, sc)).To(Succeed())
			cond := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(networkingv1.ServiceCIDRReasonTerminating))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// A terminating ServiceCIDR gives no new address.
		Consistently(func(g Gomega) {
			err := env.Client.Create(ctx, service(fmt.Sprintf("late%d", GinkgoParallelProcess()), ns))
			g.Expect(err).To(MatchError(ContainSubstring("failed to allocate")))
		}).WithTimeout(time.Second).WithPolling(300 * time.Millisecond).Should(Succeed())

		Expect(env.Client.Create(ctx, serviceCIDR("wider", "10.120.0.0/16"))).To(Succeed())
		Eventually(gone(ctx, "second")).WithTimeout(timeout).WithPolling(interval).Should(Satisfy(apierrors.IsNotFound))
	})

	It("lets a ServiceCIDR go once its last address is released", func(ctx SpecContext) {
		Expect(env.Client.Create(ctx, serviceCIDR("lonely", "10.130.0.0/24"))).To(Succeed())
		Eventually(ready(ctx, "lonely")).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		svc := builder.Service("pinned", ns).Port("http", 80, intstr.FromInt32(80)).ClusterIPs("10.130.0.9").Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Expect(env.Client.Delete(ctx, serviceCIDR("lonely"))).To(Succeed())
		Consistently(gone(ctx, "lonely")).WithTimeout(2 * time.Second).Should(Succeed())
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		Eventually(gone(ctx, "lonely")).WithTimeout(timeout).WithPolling(interval).Should(Satisfy(apierrors.IsNotFound))
	})

	It("reports on ServiceCIDRBindings", func(ctx SpecContext) {
		b := &svcnetv1alpha1.ServiceCIDRBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "team-b"},
			Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{
				ServiceCIDRName:   "team-b",
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}},
			},
		}
		Expect(env.Client.Create(ctx, b)).To(Succeed())
		condition := func(g Gomega) *metav1.Condition {
			got := &svcnetv1alpha1.ServiceCIDRBinding{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
			c := meta.FindStatusCondition(got.Status.Conditions, svcnetv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			return c
		}
		Eventually(func(g Gomega) {
			g.Expect(condition(g).Reason).To(Equal(svcnetv1alpha1.ReasonServiceCIDRNotFound))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Expect(env.Client.Create(ctx, serviceCIDR("team-b", "10.140.0.0/24"))).To(Succeed())
		Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-b-", Labels: map[string]string{"team": "b"}}})).To(Succeed())
		Eventually(func(g Gomega) {
			c := condition(g)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(svcnetv1alpha1.ReasonBound))
			g.Expect(c.Message).To(ContainSubstring("serves 1 namespace"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		bad := b.DeepCopy()
		bad.ResourceVersion, bad.Name = "", "empty-selector"
		bad.Spec.NamespaceSelector = metav1.LabelSelector{}
		Expect(env.Client.Create(ctx, bad)).To(MatchError(ContainSubstring("namespaceSelector must select something")))
		changed := &svcnetv1alpha1.ServiceCIDRBinding{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), changed)).To(Succeed())
		changed.Spec.ServiceCIDRName = "other"
		Expect(env.Client.Update(ctx, changed)).To(MatchError(ContainSubstring("serviceCIDRName is immutable")))
	})
	It("puts back a removed finalizer, a changed Ready condition and a binding's edited status", func(ctx SpecContext) {
		Expect(env.Client.Create(ctx, serviceCIDR("edited", "10.141.0.0/24"))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { _ = env.Client.Delete(ctx, serviceCIDR("edited")) })
		Eventually(ready(ctx, "edited")).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		before := repairs.Count("ServiceCIDR", repairs.ReasonEdited)
		sc := &networkingv1.ServiceCIDR{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: "edited"}, sc)).To(Succeed())
		sc.Finalizers = nil
		Expect(env.Client.Update(ctx, sc)).To(Succeed())
		// The controller may put the finalizer back before the status
		// edit: edit the latest version.
		Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "edited"}, sc); err != nil {
				return err
			}
			meta.SetStatusCondition(&sc.Status.Conditions, metav1.Condition{Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionFalse, Reason: "ByHand", Message: "edited"})
			return env.Client.Status().Update(ctx, sc)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(ready(ctx, "edited")).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())
		// The repair is counted after its write, which may be seen first.
		Eventually(func() float64 { return repairs.Count("ServiceCIDR", repairs.ReasonEdited) }).
			WithTimeout(repairTimeout).WithPolling(interval).Should(BeNumerically(">", before))

		b := &svcnetv1alpha1.ServiceCIDRBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "edited"},
			Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{ServiceCIDRName: "edited",
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "edited"}}},
		}
		Expect(env.Client.Create(ctx, b)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { _ = env.Client.Delete(ctx, b) })
		bound := func(g Gomega) {
			got := &svcnetv1alpha1.ServiceCIDRBinding{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(b), got)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, svcnetv1alpha1.ConditionReady)).To(BeTrue())
			g.Expect(got.Status.Namespaces).To(BeZero())
		}
		Eventually(bound).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
				return err
			}
			b.Status.Namespaces = 42
			b.Status.Conditions = nil
			return env.Client.Status().Update(ctx, b)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(bound).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())
	})
})
