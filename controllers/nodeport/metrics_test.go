// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
	"github.com/svcnet-io/svcnet/test/builder"
)

const (
	upstreamAllocated = "kube_apiserver_nodeport_allocator_allocated_ports"
	upstreamAvailable = "kube_apiserver_nodeport_allocator_available_ports"
)

var _ = Describe("kube-apiserver's nodePort allocator gauges", func() {
	It("give the range's usage, as svcnet's gauges do", func(ctx SpecContext) {
		ns, err := env.Namespace(ctx, "gauges")
		Expect(err).NotTo(HaveOccurred())
		read := func(g Gomega) (allocated, available float64) {
			value := func(name string, labels map[string]string) float64 {
				v, err := metricstest.Value(metrics.Registry, name, labels)
				g.Expect(err).NotTo(HaveOccurred())
				return v
			}
			allocated, available = value(upstreamAllocated, nil), value(upstreamAvailable, nil)
			svcnetRange := map[string]string{"range": "30000-31999"}
			g.Expect(value("svcnet_nodeport_allocated", svcnetRange)).To(Equal(allocated))
			g.Expect(value("svcnet_nodeport_available", svcnetRange)).To(Equal(available))
			g.Expect(allocated+available).To(Equal(2000.0), "svcnet's range, 30000-31999")
			return allocated, available
		}
		var before float64
		Eventually(func(g Gomega) { before, _ = read(g) }).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		svc := builder.Service("gauged", ns).Type(corev1.ServiceTypeNodePort).
			Port("http", 80, intstr.FromInt32(80)).Port("admin", 81, intstr.FromInt32(81)).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, svc) })
		Eventually(func(g Gomega) {
			allocated, available := read(g)
			g.Expect(allocated).To(Equal(before + 2))
			g.Expect(available).To(Equal(2000 - before - 2))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		shapes, err := metricstest.Shapes(metrics.Registry, upstreamAllocated, upstreamAvailable)
		Expect(err).NotTo(HaveOccurred())
		Expect(shapes).To(HaveLen(2))
		for name, s := range shapes {
			Expect(s.Type).To(Equal("GAUGE"), name)
			Expect(s.Labels).To(BeEmpty(), name)
			Expect(s.Help).To(HavePrefix("[ALPHA] "), name)
		}
	})
})
