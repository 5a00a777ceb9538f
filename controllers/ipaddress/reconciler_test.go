// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipaddress_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/test/builder"
)

func service(name, ns string, ips ...string) *corev1.Service {
	b := builder.Service(name, ns).Port("http", 80, intstr.FromInt32(80))
	if len(ips) > 0 {
		b = b.ClusterIPs(ips...)
	}
	return b.Obj()
}

func ipAddress(ip, svcNamespace, svcName string) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip, Labels: map[string]string{
			networkingv1.LabelIPAddressFamily: "IPv4", networkingv1.LabelManagedBy: ipaddress.ManagedBy,
		}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: svcNamespace, Name: svcName}},
	}
}

// apiserverRepair is the reportingController of kube-apiserver's own
// ClusterIP repair loop, which runs in the envtest API server too.
const apiserverRepair = "ipallocator-repair-controller"

func events(ctx context.Context, g Gomega, uid types.UID, reason string) []eventsv1.Event {
	return eventsBy(ctx, g, ipaddress.ReportingController, uid, reason)
}

func eventsBy(ctx context.Context, g Gomega, reporter string, uid types.UID, reason string) []eventsv1.Event {
	list, err := env.Events(ctx, reporter, uid, reason)
	g.Expect(err).NotTo(HaveOccurred())
	return list
}

func parentOf(ctx context.Context, g Gomega, ip string) string {
	ipa := &networkingv1.IPAddress{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: ip}, ipa)).To(Succeed())
	return ipa.Spec.ParentRef.Namespace + "/" + ipa.Spec.ParentRef.Name
}

var _ = Describe("IPAddress audit", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		var err error
		ns, err = env.Namespace(ctx, "audit")
		Expect(err).NotTo(HaveOccurred())
	})

	// kube-apiserver's own repair loop reacts to the deletion too, and either
	// may recreate the IPAddress first: the one that finds it already back
	// stays silent. That svcnet repairs alone is a unit test (unit_test.go).
	It("recreates a missing IPAddress within seconds, with at most one Event", func(ctx SpecContext) {
		svc := service("web", ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		Expect(env.Client.Delete(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: svc.Spec.ClusterIP}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(parentOf(ctx, g, svc.Spec.ClusterIP)).To(Equal(ns + "/web"))
			ours := events(ctx, g, svc.UID, ipaddress.ReasonNotAllocated)
			g.Expect(len(ours)).To(BeNumerically("<=", 1))
			g.Expect(len(ours)+len(eventsBy(ctx, g, apiserverRepair, svc.UID, ipaddress.ReasonNotAllocated))).To(BeNumerically(">=", 1),
				"the finding is reported by svcnet or kube-apiserver")
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		// Touch the Service a few times: the finding is not repeated.
		for i := range 3 {
			Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc)).To(Succeed())
			svc.Labels = map[string]string{"touch": strings.Repeat("x", i+1)}
			Expect(env.Client.Update(ctx, svc)).To(Succeed())
		}
		Expect(env.Client.Delete(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: svc.Spec.ClusterIP}})).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(parentOf(ctx, g, svc.Spec.ClusterIP)).To(Equal(ns + "/web")) }).
			WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(len(events(ctx, g, svc.UID, ipaddress.ReasonNotAllocated))).To(BeNumerically("<=", 1))
		}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	It("repairs an IPAddress that references a Service that does not exist", func(ctx SpecContext) {
		svc := service("api", ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		ip := svc.Spec.ClusterIP
		Expect(env.Client.Delete(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip}})).To(Succeed())
		_ = env.Client.Create(ctx, ipAddress(ip, ns, "ghost")) // the audit may have recreated it first
		Eventually(func(g Gomega) { g.Expect(parentOf(ctx, g, ip)).To(Equal(ns + "/api")) }).
			WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("repairs leaked and missing IPAddresses left while the manager was down", func(ctx SpecContext) {
		svc := service("kept", ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		env.StopManager()
		Expect(env.Client.Delete(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: svc.Spec.ClusterIP}})).To(Succeed())
		leaked := ipAddress("10.96.200.200", ns, "never-created")
		Expect(env.Client.Create(ctx, leaked)).To(Succeed())
		Expect(env.RestartManager()).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(parentOf(ctx, g, svc.Spec.ClusterIP)).To(Equal(ns + "/kept"))
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(leaked), &networkingv1.IPAddress{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "leaked IPAddress still there: %v", err)
			g.Expect(events(ctx, g, leaked.UID, ipaddress.ReasonAddrNotAllocated)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("reports a ClusterIP outside every ServiceCIDR", func(ctx SpecContext) {
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "short-lived"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.150.0.0/24"}}}
		Expect(env.Client.Create(ctx, sc)).To(Succeed())
		svc := service("stranded", ns, "10.150.0.7")
		Eventually(func() error { return env.Client.Create(ctx, svc) }).WithTimeout(timeout).Should(Succeed())
		// No servicecidr controller here, hence no finalizer: it goes at once.
		Expect(env.Client.Delete(ctx, sc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(events(ctx, g, svc.UID, ipaddress.ReasonOutOfRange)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("reports an address of an exclusive ServiceCIDR given to another namespace while svcnet was down", func(ctx SpecContext) {
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "tenant-x"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.160.0.0/24"}}}
		Expect(env.Client.Create(ctx, sc)).To(Succeed())
		env.StopManager()
		svc := service("squatter", ns, "10.160.0.5")
		Eventually(func() error { return env.Client.Create(ctx, svc) }).WithTimeout(timeout).Should(Succeed())
		binding := &svcnetv1alpha1.ServiceCIDRBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-x"},
			Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{ServiceCIDRName: "tenant-x", Exclusive: true,
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}},
		}
		Expect(env.Client.Create(ctx, binding)).To(Succeed())
		Expect(env.RestartManager()).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(events(ctx, g, svc.UID, ipaddress.ReasonExclusive)).To(HaveLen(1))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("exports per-ServiceCIDR usage that agrees with the IPAddresses", func(ctx SpecContext) {
		Expect(env.Client.Create(ctx, service("counted", ns))).To(Succeed())
		Eventually(func(g Gomega) {
			var ips networkingv1.IPAddressList
			g.Expect(env.Client.List(ctx, &ips)).To(Succeed())
			inKube := 0
			for _, ip := range ips.Items {
				if strings.HasPrefix(ip.Name, "10.96.") {
					inKube++
				}
			}
			families, err := metrics.Registry.Gather()
			g.Expect(err).NotTo(HaveOccurred())
			values := map[string]float64{}
			for _, f := range families {
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "servicecidr" && l.GetValue() == "kubernetes" {
							values[f.GetName()] = m.GetGauge().GetValue()
						}
					}
				}
			}
			g.Expect(values).To(HaveKeyWithValue("svcnet_clusterip_cidr_allocated", float64(inKube)))
			g.Expect(values).To(HaveKeyWithValue("svcnet_clusterip_cidr_available", float64(65534-inKube)))
			g.Expect(values).To(HaveKeyWithValue("svcnet_clusterip_cidr_exhausted", 0.0))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})
	// Upstream's conformance test "should support IPAddress API operations"
	// creates, patches and updates IPAddresses of another API group;
	// IPAddresses of other managers are as much not svcnet's.
	It("never writes or deletes IPAddresses of other managers", func(ctx SpecContext) {
		foreign := []*networkingv1.IPAddress{
			{
				ObjectMeta: metav1.ObjectMeta{Name: "255.255.255.255", Labels: map[string]string{"type": "broadcast"}},
				Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"}},
			},
			{
				ObjectMeta: metav1.ObjectMeta{Name: "fe80::42:1dff:fe84:f9e2", Labels: map[string]string{"type": "link-local"}},
				Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"}},
			},
			// In a ServiceCIDR, naming a Service that does not exist, older
			// than the leak grace period: kube-apiserver's would be deleted.
			{
				ObjectMeta: metav1.ObjectMeta{Name: "10.96.201.201", Labels: map[string]string{
					networkingv1.LabelManagedBy: "other-allocator.example.com", networkingv1.LabelIPAddressFamily: "IPv4"}},
				Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: "nobody"}},
			},
		}
		for _, ipa := range foreign {
			Expect(env.Client.Create(ctx, ipa)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { _ = env.Client.Delete(ctx, ipa) })
		}
		patched := foreign[0].DeepCopy()
		patched.Annotations = map[string]string{"patched": "true"}
		Expect(env.Client.Patch(ctx, patched, client.MergeFrom(foreign[0]))).To(Succeed())
		foreign[0] = patched
		Consistently(func(g Gomega) {
			for _, want := range foreign {
				var got networkingv1.IPAddress
				g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(want), &got)).To(Succeed())
				g.Expect(got.UID).To(Equal(want.UID))
				g.Expect(got.ResourceVersion).To(Equal(want.ResourceVersion), "IPAddress %s was written", want.Name)
			}
		}).WithTimeout(4 * time.Second).WithPolling(interval).Should(Succeed())
	})

	It("puts back the labels of a Service's IPAddress in place", func(ctx SpecContext) {
		svc := service("relabelled", ns)
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		var ipa networkingv1.IPAddress
		Eventually(func() error { return env.Client.Get(ctx, client.ObjectKey{Name: svc.Spec.ClusterIP}, &ipa) }).
			WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		delete(ipa.Labels, networkingv1.LabelManagedBy)
		ipa.Labels[networkingv1.LabelIPAddressFamily] = "IPv6"
		Expect(env.Client.Update(ctx, &ipa)).To(Succeed())
		Eventually(func(g Gomega) {
			var got networkingv1.IPAddress
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&ipa), &got)).To(Succeed())
			g.Expect(got.Labels).To(HaveKeyWithValue(networkingv1.LabelManagedBy, ipaddress.ManagedBy))
			g.Expect(got.Labels).To(HaveKeyWithValue(networkingv1.LabelIPAddressFamily, "IPv4"))
			g.Expect(got.Spec.ParentRef.Name).To(Equal("relabelled"))
		}).WithTimeout(repairTimeout).WithPolling(interval).Should(Succeed())
	})
})
