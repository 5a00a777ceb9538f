// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
)

func annotate(kv ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// onRequestPool creates a pool that only ns may use and that gives
// addresses only on request, deleted after the spec.
func onRequestPool(ctx context.Context, name, ns string, cidrs ...string) *svcnetv1alpha1.LoadBalancerIPPool {
	p := &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{
			CIDRs: cidrs, Assignment: svcnetv1alpha1.PoolAssignmentOnRequest,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
		},
	}
	Expect(env.Client.Create(ctx, p)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(env.Client.Delete(ctx, p))).To(Succeed())
	})
	return p
}

// parentOf is the name of the Service an IPAddress names as its parent.
func parentOf(ctx context.Context, ip string) func() string {
	return func() string {
		ipa, err := ipAddress(ctx, ip)()
		if err != nil {
			return err.Error()
		}
		if ipa.Spec.ParentRef == nil {
			return "no parentRef"
		}
		return ipa.Spec.ParentRef.Name
	}
}

var _ = Describe("MetalLB's annotations and spec.loadBalancerIP", func() {
	It("takes spec.loadBalancerIP and MetalLB's loadBalancerIPs as requests, svcnet's annotation first", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-mlb-ips", ns, 0, []string{"192.168.120.0/28"})
		spec := lbService(ctx, "spec", ns, 80, func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.120.5" })
		Eventually(ingress(ctx, spec)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.120.5"}))
		Eventually(events(ctx, spec, loadbalancer.ReasonLoadBalancerIPHonoured)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal([]string{`spec.loadBalancerIP "192.168.120.5" used as svcnet.io/load-balancer-ips`}))

		metallb := lbService(ctx, "metallb", ns, 80, annotate(loadbalancer.MetalLBLegacyAnnotationIPs, "192.168.120.6"),
			func(s *corev1.Service) { s.Spec.LoadBalancerIP = "192.168.120.7" })
		Eventually(ingress(ctx, metallb)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.120.6"}))
		Eventually(events(ctx, metallb, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal([]string{`metallb.universe.tf/loadBalancerIPs "192.168.120.6" used as svcnet.io/load-balancer-ips`}))
		Eventually(events(ctx, metallb, loadbalancer.ReasonConflictingRequests)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal([]string{`annotation metallb.universe.tf/loadBalancerIPs "192.168.120.6" and spec.loadBalancerIP "192.168.120.7" disagree; ` +
				`svcnet uses annotation metallb.universe.tf/loadBalancerIPs`}))

		own := lbService(ctx, "own", ns, 80, annotate(loadbalancer.AnnotationIPs, "192.168.120.8", loadbalancer.MetalLBAnnotationIPs, "192.168.120.9"))
		Eventually(ingress(ctx, own)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.120.8"}))
		Eventually(events(ctx, own, loadbalancer.ReasonConflictingRequests)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement(`annotation svcnet.io/load-balancer-ips "192.168.120.8" and annotation metallb.io/loadBalancerIPs "192.168.120.9" disagree; ` +
				`svcnet uses annotation svcnet.io/load-balancer-ips`))
		Expect(events(ctx, own, loadbalancer.ReasonMetalLBAnnotationHonoured)()).To(BeEmpty())

		By("the honoured Event is said once, not at every reconcile")
		Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(metallb), metallb); err != nil {
				return err
			}
			metallb.Labels = map[string]string{"touched": "yes"}
			return env.Client.Update(ctx, metallb)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Consistently(events(ctx, metallb, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(2 * time.Second).WithPolling(interval).Should(HaveLen(1))
	})

	It("takes the pool a Service names, and gives nothing from one that does not exist", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-mlb-first", ns, 10, []string{"192.168.121.0/30"})
		pool(ctx, "lb-mlb-second", ns, 0, []string{"192.168.122.0/30"})
		named := lbService(ctx, "named", ns, 80, annotate(loadbalancer.MetalLBAnnotationPool, "lb-mlb-second"))
		Eventually(ingress(ctx, named)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.122.0"}))
		Eventually(events(ctx, named, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal([]string{`metallb.io/address-pool "lb-mlb-second" used as svcnet.io/load-balancer-ip-pool`}))
		ownName := lbService(ctx, "own-name", ns, 80, annotate(loadbalancer.AnnotationPool, "lb-mlb-second", loadbalancer.MetalLBLegacyAnnotationPool, "lb-mlb-first"))
		Eventually(ingress(ctx, ownName)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.122.1"}))
		Eventually(events(ctx, ownName, loadbalancer.ReasonConflictingRequests)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement(`annotation svcnet.io/load-balancer-ip-pool "lb-mlb-second" and annotation metallb.universe.tf/address-pool "lb-mlb-first" disagree; ` +
				`svcnet uses annotation svcnet.io/load-balancer-ip-pool`))

		missing := lbService(ctx, "missing", ns, 80, annotate(loadbalancer.MetalLBLegacyAnnotationPool, "lb-mlb-missing"))
		Eventually(events(ctx, missing, loadbalancer.ReasonPoolUnavailable)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{
			"LoadBalancerIPPool lb-mlb-missing, named by annotation metallb.universe.tf/address-pool, does not exist: no new address is given; the Service keeps those it has"}))
		Consistently(ingress(ctx, missing)).WithTimeout(2 * time.Second).Should(BeEmpty())

		By("a Service that names a missing pool later keeps the address it has")
		plain := lbService(ctx, "plain", ns, 80)
		Eventually(ingress(ctx, plain)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.121.0"}))
		Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
				return err
			}
			annotate(loadbalancer.AnnotationPool, "lb-mlb-missing")(plain)
			return env.Client.Update(ctx, plain)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(events(ctx, plain, loadbalancer.ReasonPoolUnavailable)).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(1))
		Consistently(ingress(ctx, plain)).WithTimeout(time.Second).Should(Equal([]string{"192.168.121.0"}))
	})

	It("gives the addresses of an OnRequest pool only to Services that request them or name it", func(ctx SpecContext) {
		ns := newNS(ctx)
		manual := onRequestPool(ctx, "lb-mlb-manual", ns, "192.168.123.0/30")
		Eventually(poolStatus(ctx, manual)).WithTimeout(timeout).WithPolling(interval).Should(HavePrefix("True Ready"))
		plain := lbService(ctx, "plain", ns, 80)
		Eventually(events(ctx, plain, loadbalancer.ReasonAllocationFailed)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement("no LoadBalancer IP: no pool of this family: IPv4 in pools (none matches)"))
		Consistently(ingress(ctx, plain)).WithTimeout(time.Second).Should(BeEmpty())

		requested := lbService(ctx, "requested", ns, 80, annotate(loadbalancer.MetalLBAnnotationIPs, "192.168.123.2"))
		Eventually(ingress(ctx, requested)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.123.2"}))
		named := lbService(ctx, "named", ns, 80, annotate(loadbalancer.AnnotationPool, "lb-mlb-manual"))
		Eventually(ingress(ctx, named)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.123.0"}))

		By("an Automatic pool beside it serves the plain Service")
		auto := pool(ctx, "lb-mlb-auto", ns, 0, []string{"192.168.123.8/30"})
		Expect(auto.Spec.Assignment).To(Equal(svcnetv1alpha1.PoolAssignmentAutomatic), "the API server's default")
		Eventually(ingress(ctx, plain)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.123.8"}))
	})

	It("shares by MetalLB's allow-shared-ip, and not between Local Services with other selectors", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-mlb-share", ns, 0, []string{"192.168.124.0/28"})
		web := lbService(ctx, "web", ns, 80, annotate(loadbalancer.MetalLBLegacyAnnotationSharingKey, "k1"))
		Eventually(ingress(ctx, web)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.124.0"}))
		tls := lbService(ctx, "tls", ns, 443, annotate(loadbalancer.MetalLBAnnotationSharingKey, "k1"))
		Eventually(ingress(ctx, tls)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.124.0"}))
		Eventually(events(ctx, tls, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal([]string{`metallb.io/allow-shared-ip "k1" used as svcnet.io/sharing-key`}))

		local := func(app string) func(*corev1.Service) {
			return func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.Selector = map[string]string{"app": app}
			}
		}
		a := lbService(ctx, "local-a", ns, 80, annotate(loadbalancer.MetalLBAnnotationSharingKey, "k2"), local("a"))
		Eventually(ingress(ctx, a)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.124.1"}))
		same := lbService(ctx, "local-a-tls", ns, 443, annotate(loadbalancer.MetalLBAnnotationSharingKey, "k2"), local("a"))
		Eventually(ingress(ctx, same)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.124.1"}))
		other := lbService(ctx, "local-b", ns, 8080, annotate(loadbalancer.MetalLBAnnotationSharingKey, "k2", loadbalancer.AnnotationIPs, "192.168.124.1"), local("b"))
		Eventually(events(ctx, other, loadbalancer.ReasonSharingConflict)).WithTimeout(timeout).WithPolling(interval).Should(ContainElement(
			MatchRegexp(`^cannot share 192\.168\.124\.1 \(sharing key "k2"\): Service %s/local-a(-tls)? uses it with externalTrafficPolicy Local and another selector$`, ns)))
		Expect(ingress(ctx, other)()).To(BeEmpty())
	})
})

var _ = Describe("a cluster moving from MetalLB", func() {
	It("keeps every address MetalLB gave", func(ctx SpecContext) {
		ns := newNS(ctx)
		By("MetalLB served these Services while svcnet's manager was not running")
		env.StopManager()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(env.RestartManager()).To(Succeed())
			}
		})
		pool(ctx, "lb-mlb-move", ns, 0, []string{"192.168.125.0/28"})
		onRequestPool(ctx, "lb-mlb-move-manual", ns, "192.168.126.0/28")
		asMetalLBLeftIt := func(name string, port int32, ip string, mutate ...func(*corev1.Service)) *corev1.Service {
			svc := lbService(ctx, name, ns, port, mutate...)
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
			Expect(env.Client.Status().Update(ctx, svc)).To(Succeed())
			return svc
		}
		plain := asMetalLBLeftIt("plain", 80, "192.168.125.9", annotate("metallb.io/ip-allocated-from-pool", "default"))
		requested := asMetalLBLeftIt("requested", 80, "192.168.126.3",
			annotate(loadbalancer.MetalLBLegacyAnnotationIPs, "192.168.126.3", loadbalancer.MetalLBAnnotationPool, "lb-mlb-move-manual"))
		fromManual := asMetalLBLeftIt("from-manual", 80, "192.168.126.5", annotate(loadbalancer.MetalLBAnnotationPool, "lb-mlb-move-manual"))
		web := asMetalLBLeftIt("web", 80, "192.168.125.12", annotate(loadbalancer.MetalLBAnnotationSharingKey, "k"))
		tls := asMetalLBLeftIt("tls", 443, "192.168.125.12", annotate(loadbalancer.MetalLBAnnotationSharingKey, "k"))
		unconverted := asMetalLBLeftIt("unconverted", 80, "192.168.125.14", annotate(loadbalancer.MetalLBLegacyAnnotationPool, "not-converted"))

		By("svcnet takes over")
		Expect(env.RestartManager()).To(Succeed())
		restarted = true
		for _, s := range []struct {
			svc *corev1.Service
			ip  string
		}{{plain, "192.168.125.9"}, {requested, "192.168.126.3"}, {fromManual, "192.168.126.5"}, {unconverted, "192.168.125.14"}} {
			Eventually(parentOf(ctx, s.ip)).WithTimeout(timeout).WithPolling(interval).Should(Equal(s.svc.Name), "the IPAddress of %s", s.ip)
		}
		Eventually(parentOf(ctx, "192.168.125.12")).WithTimeout(timeout).WithPolling(interval).Should(Or(Equal("web"), Equal("tls")))
		Consistently(func() [][]string {
			var out [][]string
			for _, s := range []*corev1.Service{plain, requested, fromManual, web, tls, unconverted} {
				out = append(out, ingress(ctx, s)())
			}
			return out
		}).WithTimeout(2 * time.Second).WithPolling(interval).Should(Equal([][]string{
			{"192.168.125.9"}, {"192.168.126.3"}, {"192.168.126.5"}, {"192.168.125.12"}, {"192.168.125.12"}, {"192.168.125.14"},
		}))
		Eventually(events(ctx, requested, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{
			`metallb.universe.tf/loadBalancerIPs "192.168.126.3" used as svcnet.io/load-balancer-ips; ` +
				`metallb.io/address-pool "lb-mlb-move-manual" used as svcnet.io/load-balancer-ip-pool`,
		}))
		for _, s := range []*corev1.Service{web, tls} {
			Eventually(events(ctx, s, loadbalancer.ReasonMetalLBAnnotationHonoured)).WithTimeout(timeout).WithPolling(interval).
				Should(Equal([]string{`metallb.io/allow-shared-ip "k" used as svcnet.io/sharing-key`}), "Service %s", s.Name)
		}
		Eventually(events(ctx, unconverted, loadbalancer.ReasonPoolUnavailable)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{
			"LoadBalancerIPPool not-converted, named by annotation metallb.universe.tf/address-pool, does not exist: no new address is given; the Service keeps those it has"}))
		Expect(events(ctx, plain, loadbalancer.ReasonAllocated)()).To(BeEmpty(), "adopted, not allocated")
		// Adopted, with the writer named: not reported as a repair of a
		// deleted IPAddress, which svcnet never had.
		Eventually(events(ctx, plain, loadbalancer.ReasonAdopted)).WithTimeout(timeout).WithPolling(interval).Should(ConsistOf(
			MatchRegexp(`^Kept 192\.168\.125\.9, given by field manager "[^"]+"; svcnet holds it now in LoadBalancerIPPool \S+$`)))
		Expect(events(ctx, unconverted, loadbalancer.ReasonMetalLBAnnotationHonoured)()).To(BeEmpty(), "the pool it names gave nothing")
	})
})
