// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/svcnet-io/svcnet/controllers/nodeport"
	"github.com/svcnet-io/svcnet/test/builder"
)

func events(ctx context.Context, g Gomega, uid types.UID, reason string) []eventsv1.Event {
	list, err := env.Events(ctx, nodeport.ReportingController, uid, reason)
	g.Expect(err).NotTo(HaveOccurred())
	return list
}

func withNodePort(name, ns string, port int32) *corev1.Service {
	svc := builder.Service(name, ns).Type(corev1.ServiceTypeNodePort).Port("http", 80, intstr.FromInt32(80)).Obj()
	svc.Spec.Ports[0].NodePort = port
	return svc
}

var _ = Describe("nodeport audit", func() {
	It("reports a port in an excluded range and one outside svcnet's range", func(ctx SpecContext) {
		ns, err := env.Namespace(ctx, "nodeport")
		Expect(err).NotTo(HaveOccurred())
		excluded := withNodePort("excluded", ns, 31050)
		Expect(env.Client.Create(ctx, excluded)).To(Succeed(), "explicit excluded ports are allowed")
		Eventually(func(g Gomega) {
			g.Expect(events(ctx, g, excluded.UID, nodeport.ReasonExcluded)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		outside := withNodePort("outside", ns, 32500)
		Expect(env.Client.Create(ctx, outside)).To(MatchError(ContainSubstring("the range of valid ports is 30000-31999")))
		// While svcnet is down, kube-apiserver (range up to 32767) takes it.
		env.StopManager()
		Expect(env.Client.Create(ctx, outside)).To(Succeed())
		Expect(env.RestartManager()).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(events(ctx, g, outside.UID, nodeport.ReasonOutOfRange)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// The restarted manager audits both again, but does not repeat what
		// the one before it reported.
		Consistently(func(g Gomega) {
			g.Expect(events(ctx, g, excluded.UID, nodeport.ReasonExcluded)).To(HaveLen(1))
			g.Expect(events(ctx, g, outside.UID, nodeport.ReasonOutOfRange)).To(HaveLen(1))
		}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
})
