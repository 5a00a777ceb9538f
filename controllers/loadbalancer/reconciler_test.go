// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"context"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/test/builder"
)

// newNS creates a namespace for one spec.
func newNS(ctx context.Context) string {
	ns, err := env.Namespace(ctx, "lb")
	Expect(err).NotTo(HaveOccurred())
	return ns
}

// pool creates a pool that only ns may use (specs share the API server),
// deleted after the spec.
func pool(ctx context.Context, name, ns string, priority int32, cidrs []string, ranges ...svcnetv1alpha1.IPRange) *svcnetv1alpha1.LoadBalancerIPPool {
	return poolWith(ctx, name, ns, priority, cidrs, ranges, nil)
}

func poolWith(ctx context.Context, name, ns string, priority int32, cidrs []string, ranges []svcnetv1alpha1.IPRange, serviceSelector *metav1.LabelSelector) *svcnetv1alpha1.LoadBalancerIPPool {
	p := &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{
			CIDRs: cidrs, Ranges: ranges, Priority: priority,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			ServiceSelector:   serviceSelector,
		},
	}
	Expect(env.Client.Create(ctx, p)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(env.Client.Delete(ctx, p))).To(Succeed())
	})
	return p
}

func lbService(ctx context.Context, name, ns string, port int32, mutate ...func(*corev1.Service)) *corev1.Service {
	svc := builder.Service(name, ns).Port("p", port, intstr.FromInt32(8080)).Type(corev1.ServiceTypeLoadBalancer).Obj()
	svc.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
	for _, m := range mutate {
		m(svc)
	}
	Expect(env.Client.Create(ctx, svc)).To(Succeed())
	return svc
}

func ingress(ctx context.Context, svc *corev1.Service) func() []string {
	return func() []string {
		var s corev1.Service
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(svc), &s); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			out = append(out, ing.IP)
		}
		return out
	}
}

func events(ctx context.Context, svc *corev1.Service, reason string) func() []string {
	return func() []string {
		evs, err := env.Events(ctx, loadbalancer.ReportingController, svc.UID, reason)
		if err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.Note)
		}
		return out
	}
}

func ipAddress(ctx context.Context, ip string) func() (*networkingv1.IPAddress, error) {
	return func() (*networkingv1.IPAddress, error) {
		var ipa networkingv1.IPAddress
		err := env.Client.Get(ctx, client.ObjectKey{Name: ip}, &ipa)
		return &ipa, err
	}
}

func poolStatus(ctx context.Context, p *svcnetv1alpha1.LoadBalancerIPPool) func() string {
	return func() string {
		var got svcnetv1alpha1.LoadBalancerIPPool
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			return err.Error()
		}
		c := apimeta.FindStatusCondition(got.Status.Conditions, "Ready")
		if c == nil {
			return "no Ready condition"
		}
		return fmt.Sprintf("%s %s: %s; capacity %s, allocated %d", c.Status, c.Reason, c.Message, got.Status.Capacity, got.Status.Allocated)
	}
}

var _ = Describe("LoadBalancer IPs from pools", func() {
	It("commits the lowest free address as an IPAddress, then writes the status", func(ctx SpecContext) {
		ns := newNS(ctx)
		p := pool(ctx, "lb-basic", ns, 0, nil, svcnetv1alpha1.IPRange{Start: "192.168.100.10", End: "192.168.100.12"})
		a := lbService(ctx, "a", ns, 80)
		Eventually(ingress(ctx, a)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.100.10"}))
		ipa, err := ipAddress(ctx, "192.168.100.10")()
		Expect(err).NotTo(HaveOccurred())
		Expect(ipa.Labels).To(HaveKeyWithValue(networkingv1.LabelManagedBy, loadbalancer.ManagedBy))
		Expect(ipa.Labels).To(HaveKeyWithValue(loadbalancer.LabelPool, "lb-basic"))
		Expect(ipa.Spec.ParentRef).To(Equal(&networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: "a"}))
		b := lbService(ctx, "b", ns, 80)
		Eventually(ingress(ctx, b)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.100.11"}))
		Eventually(events(ctx, b, loadbalancer.ReasonAllocated)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement("Assigned 192.168.100.11 from LoadBalancerIPPool lb-basic"))
		Eventually(poolStatus(ctx, p)).WithTimeout(timeout).WithPolling(interval).
			Should(Equal("True Ready: the pool gives addresses; capacity 3, allocated 2"))

		By("a ClusterIP Service, an ExternalName and another class get nothing")
		plain := builder.Service("plain", ns).Port("p", 80, intstr.FromInt32(8080)).Obj()
		Expect(env.Client.Create(ctx, plain)).To(Succeed())
		external := builder.Service("external", ns).ExternalName("db.example.com").Obj()
		Expect(env.Client.Create(ctx, external)).To(Succeed())
		other := lbService(ctx, "other-class", ns, 80, func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/lb") })
		Consistently(ingress(ctx, other)).WithTimeout(2 * time.Second).Should(BeEmpty())
		Expect(ingress(ctx, plain)()).To(BeEmpty())
		Expect(ingress(ctx, external)()).To(BeEmpty())
		// The pool has one address left: any of the three taking it shows.
		Expect(poolStatus(ctx, p)()).To(Equal("True Ready: the pool gives addresses; capacity 3, allocated 2"))
	})

	It("gives a requested address, and refuses one outside its pools with an Event", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-request", ns, 0, []string{"192.168.101.0/28"})
		svc := lbService(ctx, "want", ns, 80, func(s *corev1.Service) {
			s.Annotations = map[string]string{loadbalancer.AnnotationIPs: "192.168.101.9"}
		})
		Eventually(ingress(ctx, svc)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.101.9"}))
		bad := lbService(ctx, "outside", ns, 80, func(s *corev1.Service) {
			s.Annotations = map[string]string{loadbalancer.AnnotationIPs: "10.250.0.1"}
		})
		Eventually(events(ctx, bad, loadbalancer.ReasonAllocationFailed)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement("no LoadBalancer IP: 10.250.0.1 is not in any pool this Service may use (lb-request)"))
		taken := lbService(ctx, "taken", ns, 80, func(s *corev1.Service) {
			s.Annotations = map[string]string{loadbalancer.AnnotationIPs: "192.168.101.9"}
		})
		Eventually(events(ctx, taken, loadbalancer.ReasonAllocationFailed)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement(fmt.Sprintf("no LoadBalancer IP: 192.168.101.9 is already allocated to Service %s/want", ns)))
		garbled := lbService(ctx, "garbled", ns, 80, func(s *corev1.Service) {
			s.Annotations = map[string]string{loadbalancer.AnnotationIPs: "192.168.101.300"}
		})
		Eventually(events(ctx, garbled, loadbalancer.ReasonInvalidRequest)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement(`annotation svcnet.io/load-balancer-ips: "192.168.101.300" is not an IP address`))
		Expect(ingress(ctx, bad)()).To(BeEmpty())
		Expect(ingress(ctx, taken)()).To(BeEmpty())
	})

	It("shares one address between Services with the same key whose ports differ", func(ctx SpecContext) {
		ns := newNS(ctx)
		pool(ctx, "lb-share", ns, 0, []string{"192.168.102.0/28"})
		key := func(s *corev1.Service) { s.Annotations = map[string]string{loadbalancer.AnnotationSharingKey: "web"} }
		web := lbService(ctx, "web", ns, 80, key)
		Eventually(ingress(ctx, web)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.102.0"}))
		tls := lbService(ctx, "tls", ns, 443, key)
		Eventually(ingress(ctx, tls)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.102.0"}))
		clash := lbService(ctx, "clash", ns, 80, key, func(s *corev1.Service) {
			s.Annotations[loadbalancer.AnnotationIPs] = "192.168.102.0"
		})
		Eventually(events(ctx, clash, loadbalancer.ReasonSharingConflict)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement(fmt.Sprintf(`cannot share 192.168.102.0 (sharing key "web"): port 80/TCP is used by Service %s/web`, ns)))
		Expect(ingress(ctx, clash)()).To(BeEmpty())

		By("the holder goes: the address stays with the Service that shares it")
		Expect(env.Client.Delete(ctx, web)).To(Succeed())
		Eventually(func() (string, error) {
			ipa, err := ipAddress(ctx, "192.168.102.0")()
			if err != nil || ipa.Spec.ParentRef == nil {
				return "", err
			}
			return ipa.Spec.ParentRef.Name, nil
		}).WithTimeout(timeout).WithPolling(interval).Should(Equal("tls"))
		Consistently(ingress(ctx, tls)).WithTimeout(time.Second).Should(Equal([]string{"192.168.102.0"}))
	})

	It("takes the highest-priority pool whose selectors match", func(ctx SpecContext) {
		ns := newNS(ctx)
		poolWith(ctx, "lb-gold", ns, 10, []string{"192.168.103.0/30"}, nil, &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}})
		pool(ctx, "lb-default", ns, 0, []string{"192.168.104.0/30"})
		g := lbService(ctx, "g", ns, 80, func(s *corev1.Service) { s.Labels = map[string]string{"tier": "gold"} })
		o := lbService(ctx, "o", ns, 80)
		Eventually(ingress(ctx, g)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.103.0"}))
		Eventually(ingress(ctx, o)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.104.0"}))

		By("a pool of another namespace is not used")
		other := newNS(ctx)
		stranger := lbService(ctx, "stranger", other, 80)
		Eventually(events(ctx, stranger, loadbalancer.ReasonAllocationFailed)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement("no LoadBalancer IP: no pool of this family: IPv4 in pools (none matches)"))
	})

	It("reports exhaustion, and serves the Pending Service once the pool grows", func(ctx SpecContext) {
		ns := newNS(ctx)
		p := pool(ctx, "lb-tiny", ns, 0, []string{"192.168.105.1/32"})
		first := lbService(ctx, "first", ns, 80)
		Eventually(ingress(ctx, first)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.105.1"}))
		second := lbService(ctx, "second", ns, 80)
		Eventually(events(ctx, second, loadbalancer.ReasonAllocationFailed)).WithTimeout(timeout).WithPolling(interval).
			Should(ContainElement("no LoadBalancer IP: no free address for IPv4 in pools lb-tiny"))
		Eventually(poolStatus(ctx, p)).WithTimeout(timeout).WithPolling(interval).Should(HaveSuffix("capacity 1, allocated 1"))
		Eventually(func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			p.Spec.CIDRs = append(p.Spec.CIDRs, "192.168.105.2/32")
			return env.Client.Update(ctx, p)
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		Eventually(ingress(ctx, second)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.105.2"}))
	})

	It("stops a pool that overlaps a ServiceCIDR or a pool that serves, naming it", func(ctx SpecContext) {
		ns := newNS(ctx)
		bad := pool(ctx, "lb-in-servicecidr", ns, 0, []string{"10.96.200.0/24"})
		Eventually(poolStatus(ctx, bad)).WithTimeout(timeout).WithPolling(interval).Should(HavePrefix(
			"False Overlap: range 10.96.200.0-10.96.200.255 overlaps ServiceCIDR kubernetes (10.96.0.0/16): ClusterIPs and LoadBalancer IPs must not mix"))
		x := pool(ctx, "lb-x", ns, 0, []string{"192.168.106.0/28"})
		Eventually(poolStatus(ctx, x)).WithTimeout(timeout).WithPolling(interval).Should(HavePrefix("True Ready"))
		svc := lbService(ctx, "s", ns, 80)
		Eventually(ingress(ctx, svc)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.106.0"}))

		By("a newcomer that overlaps the serving pool stops; the serving pool goes on")
		y := pool(ctx, "lb-y", ns, 0, nil, svcnetv1alpha1.IPRange{Start: "192.168.106.15", End: "192.168.106.20"})
		Eventually(poolStatus(ctx, y)).WithTimeout(timeout).WithPolling(interval).Should(HavePrefix(
			"False Overlap: range 192.168.106.15-192.168.106.20 overlaps range 192.168.106.0-192.168.106.15 of LoadBalancerIPPool lb-x, which serves first"))
		Consistently(poolStatus(ctx, x)).WithTimeout(time.Second).WithPolling(interval).Should(HavePrefix("True Ready"))
		another := lbService(ctx, "another", ns, 80)
		Eventually(ingress(ctx, another)).WithTimeout(timeout).WithPolling(interval).Should(Equal([]string{"192.168.106.1"}))

		By("removing the newcomer leaves the serving pool as it was")
		Expect(env.Client.Delete(ctx, y)).To(Succeed())
		Consistently(poolStatus(ctx, x)).WithTimeout(time.Second).WithPolling(interval).Should(HavePrefix("True Ready"))
		Expect(ingress(ctx, svc)()).To(Equal([]string{"192.168.106.0"}))

		By("an invalid range is named")
		inv := pool(ctx, "lb-backwards", ns, 0, nil, svcnetv1alpha1.IPRange{Start: "192.168.107.9", End: "192.168.107.1"})
		Eventually(poolStatus(ctx, inv)).WithTimeout(timeout).WithPolling(interval).Should(HavePrefix(
			"False InvalidSpec: range 192.168.107.9-192.168.107.1: end is before start"))
	})

	It("rejects a pool without addresses or with a malformed CIDR at the API", func(ctx SpecContext) {
		empty := &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "lb-empty"}}
		err := env.Client.Create(ctx, empty)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("a pool needs cidrs or ranges"))
		garbled := &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "lb-garbled"},
			Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.1.0/33"}}}
		err = env.Client.Create(ctx, garbled)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("each cidr must be a CIDR"))
	})

	It("releases on deletion and type change, keeps addresses across a restart, and warns when a pool goes", func(ctx SpecContext) {
		ns := newNS(ctx)
		p := pool(ctx, "lb-life", ns, 0, []string{"192.168.108.0/29"})
		keep := lbService(ctx, "keep", ns, 80)
		gone := lbService(ctx, "gone", ns, 80)
		change := lbService(ctx, "change", ns, 80)
		Eventually(ingress(ctx, change)).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(1))
		keepIP, goneIP, changeIP := ingress(ctx, keep)()[0], ingress(ctx, gone)()[0], ingress(ctx, change)()[0]

		By("deleting a Service deletes its IPAddress")
		Expect(env.Client.Delete(ctx, gone)).To(Succeed())
		Eventually(func() bool { _, err := ipAddress(ctx, goneIP)(); return apierrors.IsNotFound(err) }).
			WithTimeout(timeout).WithPolling(interval).Should(BeTrue())

		By("a type change to ClusterIP releases the address and clears the status")
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(change), change)).To(Succeed())
		change.Spec.Type = corev1.ServiceTypeClusterIP
		change.Spec.AllocateLoadBalancerNodePorts = nil
		Expect(env.Client.Update(ctx, change)).To(Succeed())
		Eventually(func() bool { _, err := ipAddress(ctx, changeIP)(); return apierrors.IsNotFound(err) }).
			WithTimeout(timeout).WithPolling(interval).Should(BeTrue())
		Eventually(ingress(ctx, change)).WithTimeout(timeout).WithPolling(interval).Should(BeEmpty())

		By("a restart changes no address, and new Services do not collide")
		Expect(env.RestartManager()).To(Succeed())
		Consistently(ingress(ctx, keep)).WithTimeout(2 * time.Second).Should(Equal([]string{keepIP}))
		fresh := lbService(ctx, "fresh", ns, 80)
		Eventually(ingress(ctx, fresh)).WithTimeout(timeout).WithPolling(interval).Should(HaveLen(1))
		Expect(ingress(ctx, fresh)()[0]).NotTo(Equal(keepIP))

		By("a leaked IPAddress (its Service never existed) is cleaned up after the grace period")
		leaked := &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: "192.168.108.7", Labels: map[string]string{
				networkingv1.LabelManagedBy: loadbalancer.ManagedBy, networkingv1.LabelIPAddressFamily: "IPv4"}},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: "never"}},
		}
		Expect(env.Client.Create(ctx, leaked)).To(Succeed())
		Eventually(func() bool { _, err := ipAddress(ctx, leaked.Name)(); return apierrors.IsNotFound(err) }).
			WithTimeout(timeout).WithPolling(interval).Should(BeTrue())

		By("deleting the pool keeps every address and says so")
		Expect(env.Client.Delete(ctx, p)).To(Succeed())
		Eventually(events(ctx, keep, loadbalancer.ReasonNotInPool)).WithTimeout(timeout).WithPolling(interval).Should(ContainElement(
			keepIP + " is no longer in any LoadBalancerIPPool that takes this Service (pools now: none); it keeps the address until it is released"))
		Consistently(ingress(ctx, keep)).WithTimeout(time.Second).Should(Equal([]string{keepIP}))
		_, err := ipAddress(ctx, keepIP)()
		Expect(err).NotTo(HaveOccurred())
	})
})

var _ = Describe("the sample pool in config/samples", func() {
	It("applies as it is and serves a Service", func(ctx SpecContext) {
		data, err := os.ReadFile("../../config/samples/loadbalancerippool.yaml")
		Expect(err).NotTo(HaveOccurred())
		var p svcnetv1alpha1.LoadBalancerIPPool
		Expect(yaml.UnmarshalStrict(data, &p)).To(Succeed())
		Expect(env.Client.Create(ctx, &p)).To(Succeed())
		// It takes every namespace: before the next spec, the manager must
		// have let it go, or that spec's Services could still get its
		// addresses (its series leave the metrics with it).
		DeferCleanup(func(ctx SpecContext) {
			Expect(env.Client.Delete(ctx, &p)).To(Succeed())
			Eventually(func(g Gomega) {
				families, err := metrics.Registry.Gather()
				g.Expect(err).NotTo(HaveOccurred())
				for _, f := range families {
					if f.GetName() != "svcnet_loadbalancer_pool_capacity" {
						continue
					}
					for _, m := range f.GetMetric() {
						for _, l := range m.GetLabel() {
							g.Expect(l.GetName() == "pool" && l.GetValue() == p.Name).To(BeFalse(), "the manager still holds pool %s", p.Name)
						}
					}
				}
			}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		})
		Eventually(poolStatus(ctx, &p)).WithTimeout(timeout).WithPolling(interval).
			Should(HavePrefix("True Ready: the pool gives addresses; capacity 254,"))
		// It takes every namespace: Services of other specs still Pending
		// may get addresses from it too.
		svc := lbService(ctx, "sample", newNS(ctx), 80)
		Eventually(ingress(ctx, svc)).WithTimeout(timeout).WithPolling(interval).Should(ConsistOf(MatchRegexp(`^192\.168\.240\.([1-9]|[1-9]\d|1\d\d|2[0-4]\d|25[0-4])$`)))
	})
})
