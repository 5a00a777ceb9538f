// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

func nodePortSvc(name, ns string) *builder.ServiceBuilder {
	return web(name, ns).Type(corev1.ServiceTypeNodePort)
}

func nodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		out = append(out, p.NodePort)
	}
	return out
}

var _ = Describe("nodePort allocation at admission", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx, nil) })

	It("gives 500 concurrent NodePort Services distinct ports, upper band first, never an excluded one", func(ctx SpecContext) {
		const n = 500
		ports := make([]int32, n)
		Expect(testenv.Parallel(n, func(i int) error {
			svc := nodePortSvc(fmt.Sprintf("np%d", i), ns).Obj()
			if err := env.Client.Create(ctx, svc); err != nil {
				return err
			}
			ports[i] = svc.Spec.Ports[0].NodePort
			return nil
		})).To(Succeed())
		seen := map[int32]bool{}
		for _, p := range ports {
			Expect(seen).NotTo(HaveKey(p), "nodePort %d given twice", p)
			seen[p] = true
			Expect(p).To(BeNumerically(">=", 30086), "static band")
			Expect(p).To(BeNumerically("<=", 32767))
			Expect(p < 30086 || p > 30100).To(BeTrue(), "excluded port %d", p)
		}
		// Packed from the start of the band (kube-apiserver alone scatters
		// them at random over the whole range).
		for _, p := range ports {
			Expect(p).To(BeNumerically("<", 30101+n+100))
		}
	})

	It("shares one nodePort between TCP and UDP of the same port, as kube-apiserver does", func(ctx SpecContext) {
		svc := builder.Service("dns", ns).Type(corev1.ServiceTypeNodePort).
			PortProto("dns-tcp", 53, intstr.FromInt32(53), corev1.ProtocolTCP).
			PortProto("dns-udp", 53, intstr.FromInt32(53), corev1.ProtocolUDP).
			Port("metrics", 9153, intstr.FromInt32(9153)).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		got := nodePorts(svc)
		Expect(got[0]).NotTo(BeZero())
		Expect(got[1]).To(Equal(got[0]))
		Expect(got[2]).NotTo(Equal(got[0]))
	})

	It("gives LoadBalancer Services a healthCheckNodePort and honours allocateLoadBalancerNodePorts: false", func(ctx SpecContext) {
		lb := web("lb", ns).Type(corev1.ServiceTypeLoadBalancer).Obj()
		lb.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		Expect(env.Client.Create(ctx, lb)).To(Succeed())
		Expect(lb.Spec.HealthCheckNodePort).To(BeNumerically(">=", 30101))
		Expect(lb.Spec.Ports[0].NodePort).NotTo(Equal(lb.Spec.HealthCheckNodePort))

		bare := builder.Service("bare", ns).Type(corev1.ServiceTypeLoadBalancer).
			Port("http", 80, intstr.FromInt32(80)).Port("admin", 81, intstr.FromInt32(81)).Obj()
		bare.Spec.AllocateLoadBalancerNodePorts = ptr.To(false)
		bare.Spec.Ports[1].NodePort = 31081
		Expect(env.Client.Create(ctx, bare)).To(Succeed())
		Expect(nodePorts(bare)).To(Equal([]int32{0, 31081}))
	})

	It("rejects explicit ports out of range or taken, naming the range or the Service", func(ctx SpecContext) {
		holder := nodePortSvc("holder", ns).Obj()
		holder.Spec.Ports[0].NodePort = 31500
		Expect(env.Client.Create(ctx, holder)).To(Succeed())

		taken := nodePortSvc("taken", ns).Obj()
		taken.Spec.Ports[0].NodePort = 31500
		Expect(env.Client.Create(ctx, taken)).To(MatchError(ContainSubstring("spec.ports[0].nodePort: Invalid value: 31500: provided port is already allocated to Service " + ns + "/holder")))

		low := nodePortSvc("low", ns).Obj()
		low.Spec.Ports[0].NodePort = 8080
		Expect(env.Client.Create(ctx, low)).To(MatchError(ContainSubstring("the range of valid ports is 30000-32767")))

		excluded := nodePortSvc("excluded", ns).Obj()
		excluded.Spec.Ports[0].NodePort = 30090
		Expect(env.Client.Create(ctx, excluded)).To(Succeed(), "an excluded port may still be asked for")
	})

	It("holds released ports in quarantine and gives a re-created Service its ports back", func(ctx SpecContext) {
		svc := nodePortSvc("again", ns).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		port := svc.Spec.Ports[0].NodePort
		Expect(env.Client.Delete(ctx, svc)).To(Succeed())
		// Wait until svcnet saw the release (the first next port would be it).
		Eventually(func(g Gomega) {
			probe := nodePortSvc("probe", ns).Obj()
			g.Expect(env.Client.Create(ctx, probe)).To(Succeed())
			g.Expect(probe.Spec.Ports[0].NodePort).NotTo(Equal(port))
			g.Expect(env.Client.Delete(ctx, probe)).To(Succeed())
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
		for i := range 3 {
			other := nodePortSvc(fmt.Sprintf("other%d", i), ns).Obj()
			Expect(env.Client.Create(ctx, other)).To(Succeed())
			Expect(other.Spec.Ports[0].NodePort).NotTo(Equal(port))
		}
		back := nodePortSvc("again", ns).Obj()
		Expect(env.Client.Create(ctx, back)).To(Succeed())
		Expect(back.Spec.Ports[0].NodePort).To(Equal(port))
	})

	It("allocates on a type change to NodePort and keeps ports on an update that omits them", func(ctx SpecContext) {
		svc := web("grow", ns).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		svc.Spec.Type = corev1.ServiceTypeNodePort
		Expect(env.Client.Update(ctx, svc)).To(Succeed())
		port := svc.Spec.Ports[0].NodePort
		Expect(port).To(BeNumerically(">=", 30101))

		// kubectl apply of a manifest without clusterIP and nodePort.
		fresh := nodePortSvc("grow", ns).Obj()
		fresh.ResourceVersion = svc.ResourceVersion
		Expect(env.Client.Update(ctx, fresh)).To(Succeed())
		Expect(fresh.Spec.Ports[0].NodePort).To(Equal(port))
		Expect(fresh.Spec.ClusterIP).To(Equal(svc.Spec.ClusterIP))
		got := &corev1.Service{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), got)).To(Succeed())
		Expect(got.Spec.Ports[0].NodePort).To(Equal(port))
	})

	It("keeps a port's nodePort by name when an apply changes its port number, as kube-apiserver does", func(ctx SpecContext) {
		svc := nodePortSvc("renumber", ns).Obj()
		Expect(env.Client.Create(ctx, svc)).To(Succeed())
		port := svc.Spec.Ports[0].NodePort
		Expect(port).NotTo(BeZero())

		// kubectl apply of the manifest with `port: 8080` instead of 80: the
		// merged port carries no nodePort.
		changed := nodePortSvc("renumber", ns).Obj()
		changed.ResourceVersion = svc.ResourceVersion
		changed.Spec.Ports[0].Port = 8080
		Expect(env.Client.Update(ctx, changed)).To(Succeed())
		got := &corev1.Service{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(svc), got)).To(Succeed())
		Expect(got.Spec.Ports).To(HaveLen(1))
		Expect(got.Spec.Ports[0].Port).To(BeEquivalentTo(8080))
		Expect(got.Spec.Ports[0].NodePort).To(Equal(port), "the nodePort survives the port change")

		By("a renamed port is a new port and gets a new nodePort")
		renamed := got.DeepCopy()
		renamed.Spec.Ports[0].Name = "web"
		renamed.Spec.Ports[0].NodePort = 0
		Expect(env.Client.Update(ctx, renamed)).To(Succeed())
		Expect(renamed.Spec.Ports[0].NodePort).NotTo(BeZero())
		Expect(renamed.Spec.Ports[0].NodePort).NotTo(Equal(port))
	})
})
