// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipaddress_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
)

const (
	upstreamAllocated = "kube_apiserver_clusterip_allocator_allocated_ips"
	upstreamAvailable = "kube_apiserver_clusterip_allocator_available_ips"
)

var _ = Describe("kube-apiserver's ClusterIP allocator gauges", func() {
	It("give each ServiceCIDR prefix's usage, as svcnet's per-ServiceCIDR gauges do", func(ctx SpecContext) {
		ns, err := env.Namespace(ctx, "gauges")
		Expect(err).NotTo(HaveOccurred())
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "split"},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.210.0.0/24", "fd00:210::/120"}}}
		Expect(env.Client.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, sc) })
		svc := service("split-user", ns, "10.210.0.5")
		Eventually(func() error { return env.Client.Create(ctx, svc) }).WithTimeout(timeout).Should(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, svc) })

		Eventually(func(g Gomega) {
			value := func(name, label, v string) float64 {
				got, err := metricstest.Value(metrics.Registry, name, map[string]string{label: v})
				g.Expect(err).NotTo(HaveOccurred())
				return got
			}
			g.Expect(value(upstreamAllocated, "cidr", "10.210.0.0/24")).To(Equal(1.0))
			g.Expect(value(upstreamAvailable, "cidr", "10.210.0.0/24")).To(Equal(253.0))
			g.Expect(value(upstreamAllocated, "cidr", "fd00:210::/120")).To(Equal(0.0))
			g.Expect(value(upstreamAvailable, "cidr", "fd00:210::/120")).To(Equal(255.0))
			// svcnet's series add up both prefixes of the ServiceCIDR.
			g.Expect(value("svcnet_clusterip_cidr_allocated", "servicecidr", "split")).To(Equal(1.0))
			g.Expect(value("svcnet_clusterip_cidr_available", "servicecidr", "split")).To(Equal(253.0 + 255.0))
			// A single-prefix ServiceCIDR shows the same numbers under both names.
			inUse := value(upstreamAllocated, "cidr", "10.96.0.0/16")
			g.Expect(inUse).To(BeNumerically(">=", 1))
			g.Expect(value("svcnet_clusterip_cidr_allocated", "servicecidr", "kubernetes")).To(Equal(inUse))
			g.Expect(value(upstreamAvailable, "cidr", "10.96.0.0/16")).To(Equal(65534 - inUse))
			g.Expect(value("svcnet_clusterip_cidr_available", "servicecidr", "kubernetes")).To(Equal(65534 - inUse))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		shapes, err := metricstest.Shapes(metrics.Registry, upstreamAllocated, upstreamAvailable)
		Expect(err).NotTo(HaveOccurred())
		Expect(shapes).To(HaveLen(2))
		for name, s := range shapes {
			Expect(s.Type).To(Equal("GAUGE"), name)
			Expect(s.Labels).To(Equal([]string{"cidr"}), name)
			Expect(s.Help).To(HavePrefix("[ALPHA] "), name)
		}
	})
})
