// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"fmt"
	"net/netip"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

func web(name, ns string) *builder.ServiceBuilder {
	return builder.Service(name, ns).Port("http", 80, intstr.FromInt32(8080)).Selector("app", name)
}

func create(ctx context.Context, svc *corev1.Service) *corev1.Service {
	GinkgoHelper()
	Expect(env.Client.Create(ctx, svc)).To(Succeed())
	return svc
}

func addr(s string) netip.Addr {
	GinkgoHelper()
	a, err := netip.ParseAddr(s)
	Expect(err).NotTo(HaveOccurred())
	return a
}

var upperBandV4 = netip.MustParseAddr("10.96.1.1") // 10.96.0.1 + offset 256

var _ = Describe("ClusterIP allocation at admission", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx, nil) })

	It("gives 1,000 concurrent Services distinct addresses, in range, upper band first, packed from its start", func(ctx SpecContext) {
		const n = 1000
		var before networkingv1.IPAddressList
		Expect(env.Client.List(ctx, &before)).To(Succeed())
		ips := make([]string, n)
		Expect(testenv.Parallel(n, func(i int) error {
			svc := web(fmt.Sprintf("s%d", i), ns).Obj()
			if err := env.Client.Create(ctx, svc); err != nil {
				return err
			}
			ips[i] = svc.Spec.ClusterIP
			return nil
		})).To(Succeed())
		seen := map[string]bool{}
		kube := netip.MustParsePrefix("10.96.0.0/16")
		var highest netip.Addr
		for _, ip := range ips {
			Expect(seen).NotTo(HaveKey(ip), "%s was given twice", ip)
			seen[ip] = true
			a := addr(ip)
			Expect(kube.Contains(a)).To(BeTrue(), ip)
			Expect(a.Compare(upperBandV4)).To(BeNumerically(">=", 0), "%s is in the static band", ip)
			if a.Compare(highest) > 0 {
				highest = a
			}
		}
		// svcnet fills the upper band from its start (kube-apiserver alone
		// scatters addresses at random over the whole range): every IP lies
		// within the first addresses of the band, as many as were in use
		// before (other specs) plus n, and a few held in quarantine.
		limit := upperBandV4
		for range len(before.Items) + n + 50 {
			limit = limit.Next()
		}
		Expect(highest.Less(limit)).To(BeTrue(), "highest address %s", highest)
		// kube-apiserver committed each choice.
		for _, ip := range ips[:20] {
			ipa := &networkingv1.IPAddress{}
			Expect(env.Client.Get(ctx, client.ObjectKey{Name: ip}, ipa)).To(Succeed())
			Expect(ipa.Spec.ParentRef.Namespace).To(Equal(ns))
		}
	})

	It("honours ipFamilyPolicy and ipFamilies", func(ctx SpecContext) {
		v4, v6 := netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:96::/112")
		single := create(ctx, web("single", ns).Obj())
		Expect(single.Spec.ClusterIPs).To(HaveLen(1))
		Expect(v4.Contains(addr(single.Spec.ClusterIP))).To(BeTrue())

		prefer := create(ctx, web("prefer", ns).Families(corev1.IPFamilyPolicyPreferDualStack).Obj())
		Expect(prefer.Spec.ClusterIPs).To(HaveLen(2))
		Expect(v4.Contains(addr(prefer.Spec.ClusterIPs[0]))).To(BeTrue())
		Expect(v6.Contains(addr(prefer.Spec.ClusterIPs[1]))).To(BeTrue())

		v6first := create(ctx, web("v6first", ns).Families(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol).Obj())
		Expect(v6.Contains(addr(v6first.Spec.ClusterIPs[0]))).To(BeTrue())
		Expect(v4.Contains(addr(v6first.Spec.ClusterIPs[1]))).To(BeTrue())

		only6 := create(ctx, web("only6", ns).Families(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol).Obj())
		Expect(only6.Spec.ClusterIPs).To(HaveLen(1))
		Expect(v6.Contains(addr(only6.Spec.ClusterIP))).To(BeTrue())
		Expect(addr(only6.Spec.ClusterIP).Compare(netip.MustParseAddr("fd00:10:96::101"))).To(BeNumerically(">=", 0), "IPv6 upper band first")

		headless := create(ctx, web("headless", ns).Headless().Obj())
		Expect(headless.Spec.ClusterIPs).To(Equal([]string{corev1.ClusterIPNone}))
		external := create(ctx, builder.Service("ext", ns).ExternalName("example.com").Obj())
		Expect(external.Spec.ClusterIP).To(BeEmpty())
	})

	It("keeps explicit IPs and rejects bad ones with a clear message", func(ctx SpecContext) {
		dns := create(ctx, web("dns", ns).ClusterIPs("10.96.0.10").Obj())
		Expect(dns.Spec.ClusterIP).To(Equal("10.96.0.10"))

		err := env.Client.Create(ctx, web("outside", ns).ClusterIPs("10.97.0.1").Obj())
		Expect(err).To(MatchError(And(ContainSubstring("10.97.0.1 is not in any ServiceCIDR"), ContainSubstring("10.96.0.0/16 (kubernetes)"))))

		err = env.Client.Create(ctx, web("dup", ns).ClusterIPs("10.96.0.10").Obj())
		Expect(err).To(MatchError(ContainSubstring("already allocated to Service " + ns + "/dns")))

		half := create(ctx, web("half", ns).Families(corev1.IPFamilyPolicyRequireDualStack).ClusterIPs("10.96.0.11").Obj())
		Expect(half.Spec.ClusterIPs).To(HaveLen(2))
		Expect(half.Spec.ClusterIPs[0]).To(Equal("10.96.0.11"))
	})

	It("gives a re-created Service its address back, and holds released ones in quarantine", func(ctx SpecContext) {
		first := create(ctx, web("a", ns).Obj())
		ip := first.Spec.ClusterIP
		Expect(env.Client.Delete(ctx, first)).To(Succeed())
		Eventually(func() error {
			return env.Client.Get(ctx, client.ObjectKey{Name: ip}, &networkingv1.IPAddress{})
		}).WithTimeout(timeout).WithPolling(interval).Should(MatchError(ContainSubstring("not found")))
		// Without quarantine the lowest free address, this one, would be next.
		for i := range 5 {
			other := create(ctx, web(fmt.Sprintf("other%d", i), ns).Obj())
			Expect(other.Spec.ClusterIP).NotTo(Equal(ip))
		}
		again := create(ctx, web("a", ns).Obj())
		Expect(again.Spec.ClusterIP).To(Equal(ip))
	})

	It("allocates on a type change from ExternalName", func(ctx SpecContext) {
		svc := create(ctx, builder.Service("moving", ns).ExternalName("example.com").Obj())
		Expect(svc.Spec.ClusterIP).To(BeEmpty())
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.ExternalName = ""
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(80)}}
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		Expect(addr(svc.Spec.ClusterIP).Compare(upperBandV4)).To(BeNumerically(">=", 0))
	})

	It("gives bound namespaces their ServiceCIDR and keeps others out of an exclusive one", func(ctx SpecContext) {
		tenantNS := newNamespace(ctx, map[string]string{"team": "a"})
		sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.200.0.0/24"}}}
		Expect(env.Client.Create(ctx, sc)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, sc) })
		binding := &svcnetv1alpha1.ServiceCIDRBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"},
			Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{
				ServiceCIDRName:   "tenant-a",
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
				Exclusive:         true,
			},
		}
		Expect(env.Client.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = env.Client.Delete(ctx, binding) })
		tenant := netip.MustParsePrefix("10.200.0.0/24")

		Eventually(func(g Gomega) {
			svc := web(fmt.Sprintf("t%d", GinkgoRandomSeed()), tenantNS).Obj()
			svc.GenerateName, svc.Name = "t-", ""
			g.Expect(env.Client.Create(ctx, svc)).To(Succeed())
			g.Expect(tenant.Contains(addr(svc.Spec.ClusterIP))).To(BeTrue(), svc.Spec.ClusterIP)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())

		outsider := create(ctx, web("outsider", ns).Obj())
		Expect(tenant.Contains(addr(outsider.Spec.ClusterIP))).To(BeFalse())
		err := env.Client.Create(ctx, web("intruder", ns).ClusterIPs("10.200.0.77").Obj())
		Expect(err).To(MatchError(ContainSubstring("reserved for other namespaces")))
	})

	It("lets Services through when svcnet is down", func(ctx SpecContext) {
		env.StopManager()
		DeferCleanup(func() { Expect(env.RestartManager()).To(Succeed()) })
		svc := create(ctx, web("while-down", ns).Type(corev1.ServiceTypeNodePort).Obj())
		Expect(svc.Spec.ClusterIP).NotTo(BeEmpty(), "kube-apiserver allocated on its own")
		Expect(svc.Spec.Ports[0].NodePort).NotTo(BeZero())
	})
})
