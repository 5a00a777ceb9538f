// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// announcedCondition reads the Service's svcnet.io/LoadBalancerAnnounced
// condition as "Status Reason: Message".
func announcedCondition(ctx context.Context, svc *corev1.Service) func() string {
	return func() string {
		var s corev1.Service
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return err.Error()
		}
		c := apimeta.FindStatusCondition(s.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
		if c == nil {
			return "no condition"
		}
		return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
	}
}

// nodeReport creates or replaces a node's LoadBalancerNodeAnnouncement,
// as its agent does, deleted after the spec.
func nodeReport(ctx context.Context, node string, spec svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
	r := &svcnetv1alpha1.LoadBalancerNodeAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: node}}
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(r), r)
	if client.IgnoreNotFound(err) != nil {
		Expect(err).NotTo(HaveOccurred())
	}
	r.Spec = spec
	if err != nil {
		Expect(env.Client.Create(ctx, r)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.Client.Delete(ctx, r))).To(Succeed())
		})
		return
	}
	Expect(env.Client.Update(ctx, r)).To(Succeed())
}

var _ = Describe("The announcement condition from the nodes' reports", func() {
	It("names the node that answers, follows a takeover, and says NoCandidate on a release", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-announced", ns, 0, []string{"192.168.110.0/30"})
		svc := lbService(ctx, "web", ns, 80)
		Eventually(ingress(ctx, svc)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.110.0"}))
		// Reports name nodes; the spec's namespace keeps them apart from
		// other specs'.
		nodeA, nodeB := ns+"-a", ns+"-b"
		refs := []svcnetv1alpha1.ServiceReference{{Namespace: ns, Name: "web"}}
		start := metav1.NewMicroTime(time.Now().Add(-time.Minute).Truncate(time.Microsecond))
		later := metav1.NewMicroTime(start.Add(10 * time.Millisecond))
		latest := metav1.NewMicroTime(start.Add(20 * time.Millisecond))

		By("node A answers")
		nodeReport(ctx, nodeA, svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Addresses: []svcnetv1alpha1.L2AnsweredAddress{
			{Address: "192.168.110.0", Interface: "eth0", Protocol: svcnetv1alpha1.L2ProtocolARP, Services: refs, Since: start},
		}})
		Eventually(announcedCondition(ctx, svc)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal("True L2: 192.168.110.0 answered by " + nodeA + " (ARP on eth0)"))

		By("node B takes over from A, whose report is stale (A died)")
		nodeReport(ctx, nodeB, svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Addresses: []svcnetv1alpha1.L2AnsweredAddress{
			{Address: "192.168.110.0", Interface: "eth1", Protocol: svcnetv1alpha1.L2ProtocolARP, Services: refs, Since: later,
				Takeover: &svcnetv1alpha1.L2Takeover{FromNode: nodeA, Reason: svcnetv1alpha1.TakeoverReasonPeerLost, UnansweredFor: metav1.Duration{Duration: 3 * time.Second}}},
		}})
		Eventually(announcedCondition(ctx, svc)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal("True L2: 192.168.110.0 answered by " + nodeB + " (ARP on eth1)"))

		By("A comes back and drops its stale entry: B stays named")
		nodeReport(ctx, nodeA, svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{})
		Consistently(announcedCondition(ctx, svc)).WithTimeout(2 * time.Second).WithPolling(interval).
			Should(Equal("True L2: 192.168.110.0 answered by " + nodeB + " (ARP on eth1)"))

		By("B lets go with no other candidate")
		nodeReport(ctx, nodeB, svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Withdrawn: []svcnetv1alpha1.L2WithdrawnAddress{
			{Address: "192.168.110.0", Services: refs, Since: latest},
		}})
		Eventually(announcedCondition(ctx, svc)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal("False NoCandidate: no node may announce 192.168.110.0 (none selected, or none with a ready endpoint under externalTrafficPolicy Local)"))
	})
})
