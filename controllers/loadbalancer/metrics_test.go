// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// announced returns the value of svcnet_loadbalancer_announced for the
// Service ns/name, and whether that series exists.
func announced(ns, name string) (float64, bool) {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "svcnet_loadbalancer_announced" {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["namespace"] == ns && got["service"] == name {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

var _ = Describe("svcnet_loadbalancer_announced", func() {
	It("follows the speakers' condition on each LoadBalancer Service", func(ctx SpecContext) {
		ns := newNS(ctx)
		svc := lbService(ctx, "announced", ns, 80)
		setCondition := func(status metav1.ConditionStatus, reason string) {
			Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
			apimeta.SetStatusCondition(&svc.Status.Conditions, metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: status, Reason: reason, Message: "test"})
			Expect(env.Client.Status().Update(ctx, svc)).To(Succeed())
		}
		By("no condition yet: no series")
		Consistently(func() bool { _, ok := announced(ns, svc.Name); return ok }).WithTimeout(time.Second).Should(BeFalse())

		By("a node announces it: 1")
		setCondition(metav1.ConditionTrue, "L2")
		Eventually(func() []any { v, ok := announced(ns, svc.Name); return []any{v, ok} }).
			WithTimeout(timeout).WithPolling(interval).Should(Equal([]any{1.0, true}))

		By("no node may: 0")
		setCondition(metav1.ConditionFalse, "NoCandidate")
		Eventually(func() []any { v, ok := announced(ns, svc.Name); return []any{v, ok} }).
			WithTimeout(timeout).WithPolling(interval).Should(Equal([]any{0.0, true}))

		By("the Service deleted: no series")
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		Eventually(func() bool { _, ok := announced(ns, svc.Name); return ok }).
			WithTimeout(timeout).WithPolling(interval).Should(BeFalse())
	})
})
