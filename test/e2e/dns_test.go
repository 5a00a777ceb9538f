// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

const (
	kubeDNS   = "10.96.0.10:53"
	dnsClient = "svcnet-client"
	// dnsTimeout covers CoreDNS's own cache (30 s) after a change.
	dnsTimeout = 90 * time.Second
)

// resolverVia asks kube-dns from the client namespace over network ("udp"
// or "tcp"), whatever the Go resolver would pick.
func resolverVia(network string) *net.Resolver {
	dial := netns.DialContext(netlab.Path(dnsClient))
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dial(ctx, network, kubeDNS)
	}}
}

// TestUpDNS runs `svcnet up --nodes=2` with its cluster DNS and asks it,
// from the client namespace, about every kind of Service: A records of a
// ClusterIP Service over UDP and TCP, a headless Service's Pods before and
// after a scale, an ExternalName's CNAME, SRV for a named port, NXDOMAIN,
// curl by short name; and DNS keeps answering while a CoreDNS Pod is
// replaced.
func TestUpDNS(t *testing.T) {
	requireNetns(t)
	g := NewWithT(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, args)
	t.Cleanup(func() { stopUp(t, up) })
	c := kubeClient(t, dataDir)
	g.Expect(up.out.String()).NotTo(ContainSubstring("NOT READY"))
	// svcnet up says it is up once kube-dns answers: the first question,
	// asked once, gets its answer.
	first, cancel := context.WithTimeout(ctx, 5*time.Second)
	addrs, err := resolverVia("udp").LookupHost(first, "kubernetes.default.svc.cluster.local")
	cancel()
	g.Expect(err).NotTo(HaveOccurred(), "kube-dns answers as soon as svcnet up is up")
	g.Expect(addrs).To(Equal([]string{"10.96.0.1"}))

	coreDNS := func(g Gomega) *appsv1.Deployment {
		var d appsv1.Deployment
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &d)).To(Succeed())
		return &d
	}
	g.Eventually(func(g Gomega) { g.Expect(coreDNS(g).Status.ReadyReplicas).To(BeEquivalentTo(2)) }).
		WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(Succeed(), "both CoreDNS replicas Ready")

	labels := map[string]string{"app": "web"}
	port := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
	for _, obj := range []client.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "web", Image: hostnameImage, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9376}},
			}}}},
		}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{Selector: labels, Ports: port}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-headless"}, Spec: corev1.ServiceSpec{Selector: labels, Ports: port, ClusterIP: corev1.ClusterIPNone}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-alias"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web.default.svc.cluster.local"}},
	} {
		g.Expect(c.Create(ctx, obj)).To(Succeed())
	}
	var web corev1.Service
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, &web)).To(Succeed())
	podIPs := func(g Gomega) []string {
		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels))).To(Succeed())
		var ips []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" {
				ips = append(ips, p.Status.PodIP)
			}
		}
		slices.Sort(ips)
		return ips
	}
	lookup := func(g Gomega, r *net.Resolver, name string) []string {
		addrs, err := r.LookupHost(ctx, name)
		g.Expect(err).NotTo(HaveOccurred())
		slices.Sort(addrs)
		return addrs
	}

	t.Run("a ClusterIP Service's name is its ClusterIP, over UDP and TCP", func(t *testing.T) {
		g := NewWithT(t)
		for _, network := range []string{"udp", "tcp"} {
			g.Eventually(func(g Gomega) {
				g.Expect(lookup(g, resolverVia(network), "web.default.svc.cluster.local.")).To(Equal([]string{web.Spec.ClusterIP}))
			}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Succeed(), network)
		}
	})

	t.Run("curl by short name from the client", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func() (string, error) {
			b, err := exec.Command("ip", "netns", "exec", dnsClient, "curl", "-s", "--max-time", "5", "http://web/").CombinedOutput()
			return string(b), err
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(HavePrefix("web-"))
	})

	t.Run("a headless Service's name lists its Pods, and follows a scale", func(t *testing.T) {
		g := NewWithT(t)
		r := resolverVia("udp")
		name := "web-headless.default.svc.cluster.local."
		g.Eventually(func(g Gomega) {
			want := podIPs(g)
			g.Expect(want).To(HaveLen(3))
			g.Expect(lookup(g, r, name)).To(Equal(want))
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Succeed())
		var d appsv1.Deployment
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web"}, &d)).To(Succeed())
		d.Spec.Replicas = ptr.To[int32](5)
		g.Expect(c.Update(ctx, &d)).To(Succeed())
		g.Eventually(func(g Gomega) {
			want := podIPs(g)
			g.Expect(want).To(HaveLen(5))
			g.Expect(lookup(g, r, name)).To(Equal(want))
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Succeed())
	})

	t.Run("an ExternalName Service is a CNAME", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func() (string, error) {
			return resolverVia("udp").LookupCNAME(ctx, "web-alias.default.svc.cluster.local.")
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Equal("web.default.svc.cluster.local."))
	})

	t.Run("a named port has an SRV record", func(t *testing.T) {
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			_, srvs, err := resolverVia("udp").LookupSRV(ctx, "http", "tcp", "web.default.svc.cluster.local.")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(srvs).To(HaveLen(1))
			g.Expect(srvs[0].Target).To(Equal("web.default.svc.cluster.local."))
			g.Expect(srvs[0].Port).To(BeEquivalentTo(80))
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Succeed())
	})

	t.Run("a missing name is NXDOMAIN", func(t *testing.T) {
		g := NewWithT(t)
		_, err := resolverVia("udp").LookupHost(ctx, "missing.default.svc.cluster.local.")
		var dnsErr *net.DNSError
		g.Expect(errors.As(err, &dnsErr)).To(BeTrue(), "%v", err)
		g.Expect(dnsErr.IsNotFound).To(BeTrue(), "%v", err)
	})

	t.Run("DNS answers while a CoreDNS Pod is replaced", func(t *testing.T) {
		g := NewWithT(t)
		var pods corev1.PodList
		g.Expect(c.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(2))
		victim := pods.Items[0]
		g.Expect(c.Delete(ctx, &victim)).To(Succeed())
		// A name's answer may come from a cache; each missing name is new,
		// so its NXDOMAIN comes from a CoreDNS that is up.
		r := resolverVia("udp")
		deadline := time.Now().Add(30 * time.Second)
		failures := 0
		for i := 0; time.Now().Before(deadline); i++ {
			if _, err := r.LookupHost(ctx, "web.default.svc.cluster.local."); err != nil {
				failures++
				t.Logf("lookup %d failed: %v", i, err)
			}
			var dnsErr *net.DNSError
			if _, err := r.LookupHost(ctx, fmt.Sprintf("missing-%d.default.svc.cluster.local.", i)); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				failures++
				t.Logf("lookup %d of a missing name: %v, want NXDOMAIN", i, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		g.Expect(failures).To(BeZero(), "lookups failed while a CoreDNS Pod was replaced")
		g.Eventually(func(g Gomega) {
			var now corev1.PodList
			g.Expect(c.List(ctx, &now, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"})).To(Succeed())
			names := []string{}
			for _, p := range now.Items {
				names = append(names, p.Name)
			}
			g.Expect(names).NotTo(ContainElement(victim.Name))
			g.Expect(coreDNS(g).Status.ReadyReplicas).To(BeEquivalentTo(2))
		}).WithTimeout(dnsTimeout).WithPolling(time.Second).Should(Succeed(), "the Deployment replaced the Pod")
		out := up.out.String()
		g.Expect(strings.Contains(out, "cluster DNS: CoreDNS")).To(BeTrue(), "svcnet up says where DNS is")
	})
}
