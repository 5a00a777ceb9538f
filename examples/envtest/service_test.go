// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	timeout  = 10 * time.Second
	interval = 50 * time.Millisecond
)

func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "operator-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// readyPod creates a Pod and reports it Running and Ready at ip, as a
// kubelet would.
func readyPod(ctx context.Context, ns, name, ip string) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
	}
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		PodIP:      ip,
		PodIPs:     []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
	}
	Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
}

func webService(ns, name string, typ corev1.ServiceType) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

var _ = Describe("a Service of the operator", func() {
	It("gets EndpointSlices for its ready Pods", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		Expect(k8s.Create(ctx, webService(ns, "web", corev1.ServiceTypeClusterIP))).To(Succeed())
		for i := 1; i <= 3; i++ {
			readyPod(ctx, ns, fmt.Sprintf("web-%d", i), fmt.Sprintf("10.244.0.%d", i))
		}

		Eventually(func(g Gomega) {
			var slices discoveryv1.EndpointSliceList
			g.Expect(k8s.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})).To(Succeed())
			g.Expect(slices.Items).To(HaveLen(1))
			s := slices.Items[0]
			g.Expect(s.Labels).To(HaveKeyWithValue(discoveryv1.LabelManagedBy, "endpointslice-controller.k8s.io"))
			g.Expect(s.Ports).To(HaveLen(1))
			g.Expect(*s.Ports[0].Port).To(BeEquivalentTo(8080))
			var ips []string
			for _, ep := range s.Endpoints {
				ips = append(ips, ep.Addresses...)
			}
			g.Expect(ips).To(ConsistOf("10.244.0.1", "10.244.0.2", "10.244.0.3"))
		}).WithTimeout(timeout).WithPolling(interval).Should(Succeed())
	})

	It("gets its ClusterIP and nodePort from svcnet's allocator", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// svcnet packs dynamic choices from the start of the upper band,
		// where kube-apiserver alone picks at random: three Services in a
		// row get three consecutive addresses and ports.
		var ips []netip.Addr
		var ports []int32
		for i := range 3 {
			svc := webService(ns, fmt.Sprintf("np-%d", i), corev1.ServiceTypeNodePort)
			Expect(k8s.Create(ctx, svc)).To(Succeed())
			ips = append(ips, netip.MustParseAddr(svc.Spec.ClusterIP))
			ports = append(ports, svc.Spec.Ports[0].NodePort)
		}
		Expect(ips[1]).To(Equal(ips[0].Next()))
		Expect(ips[2]).To(Equal(ips[1].Next()))
		Expect(ports[1]).To(Equal(ports[0] + 1))
		Expect(ports[2]).To(Equal(ports[1] + 1))
	})
})
