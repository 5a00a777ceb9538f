// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

const (
	ipAllocations      = "kube_apiserver_clusterip_allocator_allocation_total"
	ipAllocationErrors = "kube_apiserver_clusterip_allocator_allocation_errors_total"
	ipAllocationTime   = "kube_apiserver_clusterip_allocator_allocation_duration_seconds"
	portAllocations    = "kube_apiserver_nodeport_allocator_allocation_total"
	portErrors         = "kube_apiserver_nodeport_allocator_allocation_errors_total"
	ownAllocations     = "svcnet_admission_allocations_total"
	ownErrors          = "svcnet_admission_allocation_errors_total"
)

// allocatorSeries reads every series of the allocation families from the
// manager's registry, keyed `name{label="value",...}` (labels sorted): a
// counter's value, a histogram's sample count.
func allocatorSeries() map[string]float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "kube_apiserver_") && !strings.HasPrefix(f.GetName(), "svcnet_admission_allocation") {
			continue
		}
		for _, m := range f.GetMetric() {
			out[seriesKey(f.GetName(), m)] = m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

func seriesKey(name string, m *dto.Metric) string {
	var labels []string
	for _, l := range m.GetLabel() { // sorted by the registry
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return name + "{" + strings.Join(labels, ",") + "}"
}

// changes returns what changed between two reads of allocatorSeries.
func changes(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

var _ = Describe("kube-apiserver's allocator metrics", func() {
	const v4, v6 = `cidr="10.96.0.0/16"`, `cidr="fd00:10:96::/112"`
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx, nil) })

	It("count the ClusterIPs svcnet chooses by prefix and scope, and the ones it refuses", func(ctx SpecContext) {
		before := allocatorSeries()
		create(ctx, web("dynamic", ns).Obj())
		create(ctx, web("dual", ns).Families(corev1.IPFamilyPolicyPreferDualStack).Obj())
		create(ctx, web("static", ns).ClusterIPs("10.96.0.60").Obj())
		Expect(env.Client.Create(ctx, web("taken", ns).ClusterIPs("10.96.0.60").Obj())).To(MatchError(ContainSubstring("already allocated")))
		Expect(env.Client.Create(ctx, web("outside", ns).ClusterIPs("10.97.0.1").Obj())).To(MatchError(ContainSubstring("not in any ServiceCIDR")))
		Expect(env.Client.Create(ctx, web("dry", ns).Obj(), client.DryRunAll)).To(Succeed())

		Expect(changes(before, allocatorSeries())).To(Equal(map[string]float64{
			ipAllocations + `{` + v4 + `,scope="dynamic"}`: 2,
			ipAllocations + `{` + v6 + `,scope="dynamic"}`: 1,
			ipAllocations + `{` + v4 + `,scope="static"}`:  1,
			ipAllocationTime + `{` + v4 + `}`:              3,
			ipAllocationTime + `{` + v6 + `}`:              1,
			// kube-apiserver has no allocator, hence no series, for 10.97.0.1.
			ipAllocationErrors + `{` + v4 + `,scope="static"}`: 1,
			// svcnet's own series count the dry run and both refusals.
			ownAllocations + `{kind="clusterip",scope="dynamic"}`: 4,
			ownAllocations + `{kind="clusterip",scope="static"}`:  1,
			ownErrors + `{kind="clusterip",scope="static"}`:       2,
		}))
	})

	It("count a full ServiceCIDR as a dynamic error on its prefix", func(ctx SpecContext) {
		tinyNS := newNamespace(ctx, map[string]string{"team": "tiny"})
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "tiny"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.201.0.0/30"}}}
		Expect(env.Client.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, sc) })
		binding := &svcnetv1alpha1.ServiceCIDRBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tiny"},
			Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{
				ServiceCIDRName:   "tiny",
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "tiny"}},
			},
		}
		Expect(env.Client.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, binding) })
		DeferCleanup(func(ctx context.Context) {
			_ = env.Client.DeleteAllOf(ctx, &corev1.Service{}, client.InNamespace(tinyNS))
		})
		tiny := netip.MustParsePrefix("10.201.0.0/30")
		Eventually(func(g Gomega) { // until svcnet sees the binding
			svc := web("", tinyNS).Obj()
			svc.GenerateName, svc.Name = "first-", ""
			g.Expect(env.Client.Create(ctx, svc)).To(Succeed())
			g.Expect(tiny.Contains(addr(svc.Spec.ClusterIP))).To(BeTrue(), svc.Spec.ClusterIP)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		before := allocatorSeries()
		last := create(ctx, web("last", tinyNS).Obj())
		Expect(tiny.Contains(addr(last.Spec.ClusterIP))).To(BeTrue(), last.Spec.ClusterIP)
		Expect(env.Client.Create(ctx, web("one-too-many", tinyNS).Obj())).To(MatchError(ContainSubstring("failed to allocate a ClusterIP")))

		const cidr = `cidr="10.201.0.0/30"`
		Expect(changes(before, allocatorSeries())).To(Equal(map[string]float64{
			ipAllocations + `{` + cidr + `,scope="dynamic"}`:      1,
			ipAllocationTime + `{` + cidr + `}`:                   1,
			ipAllocationErrors + `{` + cidr + `,scope="dynamic"}`: 1,
			ownAllocations + `{kind="clusterip",scope="dynamic"}`: 1,
			ownErrors + `{kind="clusterip",scope="dynamic"}`:      1,
		}))
	})

	It("count the nodePorts svcnet chooses by scope, and the ones it refuses", func(ctx SpecContext) {
		before := allocatorSeries()
		create(ctx, nodePortSvc("dynamic", ns).Obj())
		static := nodePortSvc("static", ns).Obj()
		static.Spec.Ports[0].NodePort = 31600
		create(ctx, static)
		taken := nodePortSvc("taken", ns).Obj()
		taken.Spec.Ports[0].NodePort = 31600
		Expect(env.Client.Create(ctx, taken)).To(MatchError(ContainSubstring("already allocated")))
		low := nodePortSvc("low", ns).Obj()
		low.Spec.Ports[0].NodePort = 8080
		Expect(env.Client.Create(ctx, low)).To(MatchError(ContainSubstring("the range of valid ports")))

		Expect(changes(before, allocatorSeries())).To(Equal(map[string]float64{
			portAllocations + `{scope="dynamic"}`:                1,
			portAllocations + `{scope="static"}`:                 1,
			portErrors + `{scope="static"}`:                      2,
			ownAllocations + `{kind="nodeport",scope="dynamic"}`: 1,
			ownAllocations + `{kind="nodeport",scope="static"}`:  1,
			ownErrors + `{kind="nodeport",scope="static"}`:       2,
			// Each Service got its ClusterIP before its nodePort was refused.
			ipAllocations + `{` + v4 + `,scope="dynamic"}`:        4,
			ipAllocationTime + `{` + v4 + `}`:                     4,
			ownAllocations + `{kind="clusterip",scope="dynamic"}`: 4,
		}))
	})
})
