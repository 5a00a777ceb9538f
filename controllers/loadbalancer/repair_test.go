// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// repairTimeout bounds how long an object someone else deleted or changed
// stays so.
const repairTimeout = 5 * time.Second

var _ = Describe("LoadBalancer repairs and other classes", func() {
	// Upstream's conformance test "should complete a service status
	// lifecycle" patches and updates the status of a Service of the class
	// example.com/internal-vip; nothing but the test may write it.
	It("leaves a Service of another loadBalancerClass alone, even in a pool that would take it", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-other-class", ns, 0, []string{"192.168.110.0/28"})
		svc := lbService(ctx, "test-service", ns, 80, func(s *corev1.Service) {
			s.Spec.LoadBalancerClass = ptr.To("example.com/internal-vip")
			s.Spec.AllocateLoadBalancerNodePorts = nil
		})
		status, err := json.Marshal(corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(env.Client.Status().Patch(ctx, svc, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"patchedstatus":"true"}},"status":{"loadBalancer":`+string(status)+`}}`)))).To(Succeed())
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{
			Type: "StatusUpdate", Status: metav1.ConditionTrue, Reason: "E2E", Message: "Set from e2e test", LastTransitionTime: metav1.Now()})
		Expect(env.Client.Status().Update(ctx, svc)).To(Succeed())
		Consistently(func(g Gomega) {
			var now corev1.Service
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(svc.ResourceVersion), "the Service was written")
			var held networkingv1.IPAddressList
			g.Expect(env.Client.List(ctx, &held, client.MatchingLabels{networkingv1.LabelManagedBy: loadbalancer.ManagedBy})).To(Succeed())
			for _, ipa := range held.Items {
				g.Expect(ipa.Spec.ParentRef.Namespace).NotTo(Equal(ns))
			}
		}).WithTimeout(3 * time.Second).WithPolling(interval).Should(Succeed())

	})

	It("takes its address back when someone deletes its IPAddress, and puts back the status and labels", func(ctx SpecContext) {
		ns := newNS(ctx)
		p := pool(ctx, "lb-repair", ns, 0, []string{"192.168.111.0/28"})
		// The Service holds an address above a free one: a new choice
		// would not give it back.
		below := lbService(ctx, "below", ns, 80)
		Eventually(ingress(ctx, below)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.111.0"}))
		svc := lbService(ctx, "web", ns, 80)
		const addr = "192.168.111.1"
		Eventually(ingress(ctx, svc)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{addr}))
		Expect(env.Client.Delete(ctx, below)).To(Succeed())
		Eventually(func() error { _, err := ipAddress(ctx, "192.168.111.0")(); return err }).
			WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("not found")))
		first, err := ipAddress(ctx, addr)()
		Expect(err).NotTo(HaveOccurred())

		By("the IPAddress deleted")
		deleted := repairs.Count("IPAddress", repairs.ReasonDeleted)
		Expect(env.Client.Delete(ctx, first)).To(Succeed())
		Eventually(func(g Gomega) {
			ipa, err := ipAddress(ctx, addr)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ipa.UID).NotTo(Equal(first.UID))
			g.Expect(ipa.Spec.ParentRef.Name).To(Equal("web"))
			g.Expect(ingress(ctx, svc)()).To(Equal([]string{addr}))
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())
		// The repair is counted after its write: the new IPAddress may be
		// seen first.
		Eventually(func() float64 { return repairs.Count("IPAddress", repairs.ReasonDeleted) }).
			WithTimeout(repairTimeout).WithPolling(interval).Should(BeNumerically(">", deleted))

		By("the status cleared")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Status.LoadBalancer.Ingress = nil
		Expect(env.Client.Status().Update(ctx, svc)).To(Succeed())
		Eventually(ingress(ctx, svc)).WithTimeout(repairTimeout).WithPolling(interval).Should(Equal([]string{addr}))

		By("the managed-by label removed")
		ipa, err := ipAddress(ctx, addr)()
		Expect(err).NotTo(HaveOccurred())
		ipa.Labels = maps.Clone(ipa.Labels)
		delete(ipa.Labels, networkingv1.LabelManagedBy)
		Expect(env.Client.Update(ctx, ipa)).To(Succeed())
		Eventually(func(g Gomega) {
			got, err := ipAddress(ctx, addr)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.UID).To(Equal(ipa.UID))
			g.Expect(got.Labels).To(HaveKeyWithValue(networkingv1.LabelManagedBy, loadbalancer.ManagedBy))
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())

		By("the pool's status edited")
		var pl svcnetv1alpha1.LoadBalancerIPPool
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), &pl)).To(Succeed())
		pl.Status.Allocated = 99
		Expect(env.Client.Status().Update(ctx, &pl)).To(Succeed())
		Eventually(poolStatus(ctx, p)).WithTimeout(repairTimeout).WithPolling(interval).
			Should(Equal("True Ready: the pool gives addresses; capacity 16, allocated 1"))

		By("the IPAddress taken by another manager: the Service moves, the IPAddress stays theirs")
		ipa, err = ipAddress(ctx, addr)()
		Expect(err).NotTo(HaveOccurred())
		ipa.Labels[networkingv1.LabelManagedBy] = "other.example.com"
		Expect(env.Client.Update(ctx, ipa)).To(Succeed())
		Eventually(func(g Gomega) {
			got := ingress(ctx, svc)()
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0]).NotTo(Equal(addr))
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())
		Consistently(func(g Gomega) {
			got, err := ipAddress(ctx, addr)()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.ResourceVersion).To(Equal(ipa.ResourceVersion))
		}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Succeed())
		Expect(env.Client.Delete(context.Background(), ipa)).To(Succeed())
	})
})
