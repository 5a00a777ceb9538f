// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/controllers/endpointslicemirroring"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
)

// state is one read of what the checks look at.
type state struct {
	services  map[string]*corev1.Service
	pods      []corev1.Pod
	nodes     []corev1.Node
	slices    []discoveryv1.EndpointSlice
	endpoints map[string]*corev1.Endpoints
	addresses map[string]*networkingv1.IPAddress
}

func (w *world) read(g Gomega) *state {
	st := &state{services: map[string]*corev1.Service{}, endpoints: map[string]*corev1.Endpoints{}, addresses: map[string]*networkingv1.IPAddress{}}
	var services corev1.ServiceList
	g.Expect(w.c.List(w.ctx, &services, client.InNamespace(w.ns))).To(Succeed())
	for i := range services.Items {
		st.services[services.Items[i].Name] = &services.Items[i]
	}
	var pods corev1.PodList
	g.Expect(w.c.List(w.ctx, &pods, client.InNamespace(w.ns))).To(Succeed())
	st.pods = pods.Items
	var nodes corev1.NodeList
	g.Expect(w.c.List(w.ctx, &nodes)).To(Succeed())
	st.nodes = nodes.Items
	var sl discoveryv1.EndpointSliceList
	g.Expect(w.c.List(w.ctx, &sl, client.InNamespace(w.ns))).To(Succeed())
	st.slices = sl.Items
	var eps corev1.EndpointsList
	g.Expect(w.c.List(w.ctx, &eps, client.InNamespace(w.ns))).To(Succeed())
	for i := range eps.Items {
		st.endpoints[eps.Items[i].Name] = &eps.Items[i]
	}
	var ips networkingv1.IPAddressList
	g.Expect(w.c.List(w.ctx, &ips)).To(Succeed())
	for i := range ips.Items {
		st.addresses[ips.Items[i].Name] = &ips.Items[i]
	}
	return st
}

// converged checks that the world holds what upstream's controllers would,
// and that nothing that is not svcnet's was written.
func (w *world) converged(g Gomega) {
	st := w.read(g)
	w.checkSlices(g, st)
	w.checkMirrored(g, st)
	w.checkNoOrphanSlices(g, st)
	w.checkClusterIPs(g, st)
	w.checkLoadBalancers(g, st)
	w.checkStatuses(g)
	w.checkForeign(g)
}

// slicesOf returns the slices of a Service that managedBy owns.
func (st *state) slicesOf(svc, managedBy string) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, s := range st.slices {
		if s.Labels[discoveryv1.LabelServiceName] == svc && s.Labels[discoveryv1.LabelManagedBy] == managedBy {
			out = append(out, s)
		}
	}
	return out
}

// checkSlices compares the slices of every Service with a selector with
// those upstream's controller writes for the same Service and Pods.
func (w *world) checkSlices(g Gomega, st *state) {
	for name, svc := range st.services {
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		ours := st.slicesOf(name, endpointslice.ManagedBy)
		g.Expect(ours).NotTo(BeEmpty(), "Service %s has no EndpointSlice", name)
		var pods []*corev1.Pod
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for i := range st.pods {
			if sel.Matches(labels.Set(st.pods[i].Labels)) {
				pods = append(pods, &st.pods[i])
			}
		}
		theirs, err := upstreamSlices(svc, pods, st.nodes)
		g.Expect(err).NotTo(HaveOccurred())
		got, twice := publishedBy(ours)
		g.Expect(twice).To(BeEmpty(), "Service %s publishes addresses twice", name)
		want, _ := publishedBy(theirs)
		g.Expect(cmp.Diff(want, got)).To(BeEmpty(), "Service %s: endpoints differ from upstream's (-upstream +svcnet)", name)
		for _, s := range ours {
			g.Expect(s.Labels).To(Equal(theirs[0].Labels), "labels of EndpointSlice %s", s.Name)
			ref := metav1.GetControllerOf(&s)
			g.Expect(ref).NotTo(BeNil(), "EndpointSlice %s has no controller", s.Name)
			g.Expect(ref.UID).To(Equal(svc.UID), "EndpointSlice %s is controlled by %s", s.Name, ref.Name)
			g.Expect(len(s.Endpoints)).To(BeNumerically("<=", endpointslice.DefaultMaxEndpointsPerSlice))
		}
	}
}

// checkMirrored compares the mirrored slices of every Service without a
// selector with its hand-written Endpoints.
func (w *world) checkMirrored(g Gomega, st *state) {
	for name, svc := range st.services {
		if len(svc.Spec.Selector) > 0 {
			continue
		}
		// An address listed twice is mirrored once, ready first, as
		// upstream's mirroring controller does.
		want := []string{}
		seen := map[string]bool{}
		add := func(addrs []corev1.EndpointAddress, state string) {
			for _, a := range addrs {
				if !seen[a.IP] {
					seen[a.IP] = true
					want = append(want, a.IP+state)
				}
			}
		}
		if ep := st.endpoints[name]; ep != nil {
			for _, sub := range ep.Subsets {
				add(sub.Addresses, " ready")
				add(sub.NotReadyAddresses, " not-ready")
			}
		}
		got := []string{}
		for _, s := range st.slicesOf(name, endpointslicemirroring.ManagedBy) {
			g.Expect(s.Ports).To(Equal([]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}),
				"ports of mirrored EndpointSlice %s", s.Name)
			for _, ep := range s.Endpoints {
				state := " not-ready"
				if ptr.Deref(ep.Conditions.Ready, false) {
					state = " ready"
				}
				got = append(got, ep.Addresses[0]+state)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		g.Expect(got).To(Equal(want), "mirrored endpoints of Service %s", name)
	}
}

// checkNoOrphanSlices: every slice svcnet owns belongs to a Service that
// exists and that its controller publishes, through its owner.
func (w *world) checkNoOrphanSlices(g Gomega, st *state) {
	for _, s := range st.slices {
		name := s.Labels[discoveryv1.LabelServiceName]
		svc := st.services[name]
		ref := metav1.GetControllerOf(&s)
		switch {
		case endpointslice.Owns(&s):
			g.Expect(svc).NotTo(BeNil(), "orphan EndpointSlice %s of Service %q", s.Name, name)
			g.Expect(svc.Spec.Selector).NotTo(BeEmpty(), "EndpointSlice %s of selectorless Service %s", s.Name, name)
			g.Expect(s.Labels[discoveryv1.LabelManagedBy]).To(Equal(endpointslice.ManagedBy))
		case endpointslicemirroring.Owns(&s):
			g.Expect(svc).NotTo(BeNil(), "orphan mirrored EndpointSlice %s of Service %q", s.Name, name)
			ep := st.endpoints[name]
			g.Expect(ep).NotTo(BeNil(), "mirrored EndpointSlice %s without Endpoints", s.Name)
			g.Expect(ref).NotTo(BeNil())
			g.Expect(ref.UID).To(Equal(ep.UID), "mirrored EndpointSlice %s is controlled by %s", s.Name, ref.Name)
		}
	}
}

// checkClusterIPs: no ClusterIP twice, each with the IPAddress that names
// its Service, and no IPAddress of the allocator for a Service that does
// not hold it.
func (w *world) checkClusterIPs(g Gomega, st *state) {
	holder := map[string]string{}
	for name, svc := range st.services {
		for _, ip := range svc.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			g.Expect(holder).NotTo(HaveKey(ip), "ClusterIP %s of %s and %s", ip, name, holder[ip])
			holder[ip] = name
			ipa := st.addresses[ip]
			g.Expect(ipa).NotTo(BeNil(), "no IPAddress for ClusterIP %s of %s", ip, name)
			g.Expect(ipa.Spec.ParentRef).To(Equal(&networkingv1.ParentReference{Resource: "services", Namespace: w.ns, Name: name}))
		}
	}
	// Unlabelled ones with a Service as parent count too: someone removed
	// their labels, svcnet puts them back or cleans them up.
	serviceRange := netip.MustParsePrefix("10.96.0.0/16")
	for ip, ipa := range st.addresses {
		managedBy := ipa.Labels[networkingv1.LabelManagedBy]
		if (managedBy == ipaddress.ManagedBy || managedBy == "") && ipa.Spec.ParentRef.Namespace == w.ns && serviceRange.Contains(netip.MustParseAddr(ip)) {
			g.Expect(holder[ip]).To(Equal(ipa.Spec.ParentRef.Name), "orphan IPAddress %s", ip)
			g.Expect(managedBy).To(Equal(ipaddress.ManagedBy), "labels of IPAddress %s", ip)
		}
	}
}

// checkLoadBalancers: every LoadBalancer Service shows one address of the
// pool, no other Service shows it, svcnet's IPAddress names it; no
// IPAddress of svcnet's for a Service that does not show it; the pool's
// status counts them.
func (w *world) checkLoadBalancers(g Gomega, st *state) {
	pool := netip.MustParsePrefix(poolCIDR)
	shown := map[string]string{}
	for name, svc := range st.services {
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		g.Expect(svc.Status.LoadBalancer.Ingress).To(HaveLen(1), "ingress of %s", name)
		ip := svc.Status.LoadBalancer.Ingress[0].IP
		g.Expect(pool.Contains(netip.MustParseAddr(ip))).To(BeTrue(), "%s shows %s, outside the pool", name, ip)
		g.Expect(shown).NotTo(HaveKey(ip), "LoadBalancer IP %s of %s and %s", ip, name, shown[ip])
		shown[ip] = name
		ipa := st.addresses[ip]
		g.Expect(ipa).NotTo(BeNil(), "no IPAddress for LoadBalancer IP %s of %s", ip, name)
		g.Expect(ipa.Labels).To(HaveKeyWithValue(networkingv1.LabelManagedBy, loadbalancer.ManagedBy))
		g.Expect(ipa.Spec.ParentRef.Name).To(Equal(name))
	}
	// Every IPAddress in the pool's range takes an address, whoever
	// manages it.
	held := 0
	for ip, ipa := range st.addresses {
		managedBy := ipa.Labels[networkingv1.LabelManagedBy]
		inPool := pool.Contains(netip.MustParseAddr(ip))
		if (managedBy == loadbalancer.ManagedBy || managedBy == "") && ipa.Spec.ParentRef.Namespace == w.ns && inPool {
			g.Expect(shown[ip]).To(Equal(ipa.Spec.ParentRef.Name), "orphan LoadBalancer IPAddress %s", ip)
			g.Expect(managedBy).To(Equal(loadbalancer.ManagedBy), "labels of IPAddress %s", ip)
		}
		if inPool {
			held++
		}
	}
	var p svcnetv1alpha1.LoadBalancerIPPool
	g.Expect(w.c.Get(w.ctx, client.ObjectKey{Name: poolName}, &p)).To(Succeed())
	g.Expect(p.Status.Allocated).To(BeEquivalentTo(held), "pool status")
	g.Expect(apimeta.IsStatusConditionTrue(p.Status.Conditions, "Ready")).To(BeTrue(), "pool Ready")
}

func (w *world) checkStatuses(g Gomega) {
	var b svcnetv1alpha1.ServiceCIDRBinding
	g.Expect(w.c.Get(w.ctx, client.ObjectKey{Name: bindingName}, &b)).To(Succeed())
	g.Expect(b.Status.Namespaces).To(BeZero(), "binding status")
	g.Expect(apimeta.IsStatusConditionTrue(b.Status.Conditions, svcnetv1alpha1.ConditionReady)).To(BeTrue(), "binding Ready")
}

// checkForeign: what is not svcnet's still has the version its writer left.
func (w *world) checkForeign(g Gomega) {
	for k, rv := range w.foreign {
		var obj client.Object
		switch k.kind {
		case "EndpointSlice":
			obj = &discoveryv1.EndpointSlice{}
		case "IPAddress":
			obj = &networkingv1.IPAddress{}
		case "Endpoints":
			obj = &corev1.Endpoints{}
		default:
			panic(fmt.Sprintf("unknown kind %s", k.kind))
		}
		g.Expect(w.c.Get(w.ctx, client.ObjectKey{Namespace: k.namespace, Name: k.name}, obj)).To(Succeed(), "%s %s/%s is gone", k.kind, k.namespace, k.name)
		g.Expect(obj.GetResourceVersion()).To(Equal(rv), "%s %s/%s was written", k.kind, k.namespace, k.name)
	}
}
