// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
)

func metricValue(g Gomega, name string, labels map[string]string) float64 {
	v, err := metricstest.Value(ctrlmetrics.Registry, name, labels)
	g.Expect(err).NotTo(HaveOccurred())
	return v
}

// Other specs' Endpoints stay in the environment, so values are compared
// with those before the spec.
var _ = Describe("kube-controller-manager's mirroring metrics", Serial, func() {
	It("count a mirrored Endpoints' endpoints, slices, writes and syncs", func() {
		ctx := context.Background()
		ns := newNS(ctx)
		const prefix = "endpoint_slice_mirroring_controller_"
		desired := metricValue(Default, prefix+"endpoints_desired", nil)
		slices := metricValue(Default, prefix+"num_endpoint_slices", nil)
		desiredSlices := metricValue(Default, prefix+"desired_endpoint_slices", nil)
		creates := metricValue(Default, prefix+"changes", map[string]string{"operation": "create"})
		syncs := metricValue(Default, prefix+"endpoints_sync_duration", nil)
		added, err := metricstest.Histogram(ctrlmetrics.Registry, prefix+"endpoints_added_per_sync", nil)
		Expect(err).NotTo(HaveOccurred())

		selectorless(ctx, ns, "db")
		Expect(env.Client.Create(ctx, endpoints(ns, "db", []string{"10.0.0.1", "10.0.0.2"}, []string{"10.0.0.3"}, 5432))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(metricValue(g, prefix+"endpoints_desired", nil)).To(Equal(desired + 3))
			g.Expect(metricValue(g, prefix+"num_endpoint_slices", nil)).To(Equal(slices + 1))
			g.Expect(metricValue(g, prefix+"desired_endpoint_slices", nil)).To(Equal(desiredSlices + 1))
			g.Expect(metricValue(g, prefix+"changes", map[string]string{"operation": "create"})).To(BeNumerically(">=", creates+1))
			g.Expect(metricValue(g, prefix+"endpoints_sync_duration", nil)).To(BeNumerically(">", syncs))
			h, err := metricstest.Histogram(ctrlmetrics.Registry, prefix+"endpoints_added_per_sync", nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(h.Sum).To(BeNumerically(">=", added.Sum+3))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		By("deleting the Endpoints, their share of the gauges goes")
		Expect(env.Client.Delete(ctx, endpoints(ns, "db", nil, nil, 5432))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(metricValue(g, prefix+"endpoints_desired", nil)).To(Equal(desired))
			g.Expect(metricValue(g, prefix+"num_endpoint_slices", nil)).To(Equal(slices))
			g.Expect(metricValue(g, prefix+"desired_endpoint_slices", nil)).To(Equal(desiredSlices))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})
})
