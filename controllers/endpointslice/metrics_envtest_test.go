// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/controllers/internal/metricstest"
	"github.com/svcnet-io/svcnet/test/builder"
)

// metricValue reads one series from the registry the manager serves.
func metricValue(g Gomega, name string, labels map[string]string) float64 {
	v, err := metricstest.Value(ctrlmetrics.Registry, name, labels)
	g.Expect(err).NotTo(HaveOccurred())
	return v
}

func histogramOf(g Gomega, name string, labels map[string]string) metricstest.HistogramSeries {
	h, err := metricstest.Histogram(ctrlmetrics.Registry, name, labels)
	g.Expect(err).NotTo(HaveOccurred())
	return h
}

// Other specs' Services stay in the environment, so the gauges are
// compared with their values before each spec.
var _ = Describe("kube-controller-manager's metrics", Serial, func() {
	var ctx context.Context
	var ns string
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	It("counts a Service's endpoints, slices, writes and syncs", func() {
		none := map[string]string(nil)
		// The gauges are the whole controller's: other specs' Services may
		// still be counted in (thousands of endpoints, on a loaded
		// machine). The baseline is taken once they hold still.
		gauges := func(g Gomega) [3]float64 {
			return [3]float64{metricValue(g, "endpoint_slice_controller_endpoints_desired", none),
				metricValue(g, "endpoint_slice_controller_num_endpoint_slices", none),
				metricValue(g, "endpoint_slice_controller_desired_endpoint_slices", none)}
		}
		Eventually(func(g Gomega) {
			before := gauges(g)
			time.Sleep(time.Second)
			g.Expect(gauges(g)).To(Equal(before))
		}).WithTimeout(timeout).Should(Succeed())
		desired := metricValue(Default, "endpoint_slice_controller_endpoints_desired", none)
		slices := metricValue(Default, "endpoint_slice_controller_num_endpoint_slices", none)
		desiredSlices := metricValue(Default, "endpoint_slice_controller_desired_endpoint_slices", none)
		creates := metricValue(Default, "endpoint_slice_controller_changes", map[string]string{"operation": "create"})
		success := metricValue(Default, "endpoint_slice_controller_syncs", map[string]string{"result": "success"})
		added := histogramOf(Default, "endpoint_slice_controller_endpoints_added_per_sync", none)
		changedLabels := map[string]string{"topology": "Disabled", "traffic_distribution": "PreferClose"}
		changed := histogramOf(Default, "endpoint_slice_controller_endpointslices_changed_per_sync", changedLabels)
		byTD := metricValue(Default, "endpoint_slice_controller_services_count_by_traffic_distribution", map[string]string{"traffic_distribution": "PreferClose"})

		createPods(ctx, ns, "web", 3, nil)
		svc := webService(ns)
		svc.Spec.TrafficDistribution = ptr.To(corev1.ServiceTrafficDistributionPreferClose)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(HaveLen(3))
			g.Expect(metricValue(g, "endpoint_slice_controller_endpoints_desired", none)).To(Equal(desired + 3))
			g.Expect(metricValue(g, "endpoint_slice_controller_num_endpoint_slices", none)).To(Equal(slices + 1))
			g.Expect(metricValue(g, "endpoint_slice_controller_desired_endpoint_slices", none)).To(Equal(desiredSlices + 1))
			g.Expect(metricValue(g, "endpoint_slice_controller_changes", map[string]string{"operation": "create"})).To(BeNumerically(">=", creates+1))
			g.Expect(metricValue(g, "endpoint_slice_controller_syncs", map[string]string{"result": "success"})).To(BeNumerically(">", success))
			g.Expect(histogramOf(g, "endpoint_slice_controller_endpoints_added_per_sync", none).Sum).To(BeNumerically(">=", added.Sum+3))
			ch := histogramOf(g, "endpoint_slice_controller_endpointslices_changed_per_sync", changedLabels)
			g.Expect(ch.Count).To(BeNumerically(">", changed.Count))
			g.Expect(ch.Sum).To(BeNumerically(">=", changed.Sum+1))
			g.Expect(metricValue(g, "endpoint_slice_controller_services_count_by_traffic_distribution",
				map[string]string{"traffic_distribution": "PreferClose"})).To(Equal(byTD + 1))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		By("deleting the Service, its share of the gauges goes")
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(metricValue(g, "endpoint_slice_controller_endpoints_desired", none)).To(Equal(desired))
			g.Expect(metricValue(g, "endpoint_slice_controller_num_endpoint_slices", none)).To(Equal(slices))
			g.Expect(metricValue(g, "endpoint_slice_controller_desired_endpoint_slices", none)).To(Equal(desiredSlices))
			g.Expect(metricValue(g, "endpoint_slice_controller_services_count_by_traffic_distribution",
				map[string]string{"traffic_distribution": "PreferClose"})).To(Equal(byTD))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
})

var _ = Describe("endpoints.kubernetes.io/last-change-trigger-time", func() {
	var ctx context.Context
	var ns string
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace(ctx)
	})

	triggerOf := func(g Gomega) (string, bool) {
		got := slicesOf(g, ctx, ns, "web")
		g.Expect(got).To(HaveLen(1))
		v, ok := got[0].Annotations[corev1.EndpointsLastChangeTriggerTime]
		return v, ok
	}

	It("is the Service's creation, then a Pod's Ready transition, and goes with a sync that no change triggered", func() {
		svc := webService(ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			v, ok := triggerOf(g)
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(Equal(svc.CreationTimestamp.UTC().Format(time.RFC3339Nano)))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		By("a Pod becoming ready, long after it was created")
		pod := builder.Pod("web-0", ns).Label("app", "web").ContainerPort("http", 8080).IP("10.100.0.1").NotReady().Obj()
		Expect(env.CreatePod(ctx, pod)).To(Succeed())
		ready := metav1.NewTime(time.Now().Add(time.Hour).Truncate(time.Second))
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready}}
		Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(addresses(slicesOf(g, ctx, ns, "web"), true)).To(ConsistOf("10.100.0.1"))
			v, ok := triggerOf(g)
			g.Expect(ok).To(BeTrue())
			g.Expect(v).To(Equal(ready.UTC().Format(time.RFC3339Nano)))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())

		By("a Service label change, which no Pod or Service trigger caused")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
		svc.Labels["team"] = "b"
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			got := slicesOf(g, ctx, ns, "web")
			g.Expect(got).To(HaveLen(1))
			g.Expect(got[0].Labels).To(HaveKeyWithValue("team", "b"))
			g.Expect(got[0].Annotations).NotTo(HaveKey(corev1.EndpointsLastChangeTriggerTime))
		}).WithTimeout(timeout).WithPolling(poll).Should(Succeed())
	})
})
