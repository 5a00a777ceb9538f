// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/test/builder"
)

// kind is what a Service of the world is.
type kind int

const (
	kindClusterIP kind = iota
	kindHeadless
	kindLoadBalancer
	// kindSelectorless has no selector and hand-written Endpoints, which
	// the mirroring controller mirrors.
	kindSelectorless
	kinds
)

const (
	// poolName and poolCIDR are the LoadBalancer pool of the world.
	poolName = "fault"
	poolCIDR = "192.168.200.0/24"
	// bindingName names the ServiceCIDR and ServiceCIDRBinding of the world.
	bindingName = "fault-extra"
	// serviceLabel is copied by the EndpointSlice controller onto slices.
	serviceLabel = "fault.svcnet.io/tier"
	// minServices and maxServices bound the churn's Service count.
	minServices, maxServices = 4, 14
)

// world is the churn: Services of every kind, their Pods and hand-written
// Endpoints, created, changed and deleted at random from one seed. It also
// creates and remembers the objects that are not svcnet's.
type world struct {
	ctx      context.Context
	c        client.Client
	rnd      *rand.Rand
	ns       string
	nodes    []string
	services map[string]kind
	nextSvc  int
	nextPod  int
	// foreign are the objects that are not svcnet's, with the
	// resourceVersion they must keep.
	foreign map[foreignKey]string
	// actions counts what was done, for the report.
	actions map[string]int
}

// foreignKey names an object that is not svcnet's.
type foreignKey struct {
	kind            string
	namespace, name string
}

func newWorld(ctx context.Context, seed int64) *world {
	ns, err := env.Namespace(ctx, "fault")
	Expect(err).NotTo(HaveOccurred())
	w := &world{ctx: ctx, c: env.Client, rnd: rand.New(rand.NewSource(seed)), ns: ns,
		services: map[string]kind{}, foreign: map[foreignKey]string{}, actions: map[string]int{}}
	for i, zone := range []string{"zone-a", "zone-b", "zone-c"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-node-%d", ns, i), Labels: map[string]string{corev1.LabelTopologyZone: zone}}}
		Expect(w.c.Create(ctx, node)).To(Succeed())
		w.nodes = append(w.nodes, node.Name)
	}
	Expect(w.c.Create(ctx, &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: poolName},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{poolCIDR},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
	})).To(Succeed())
	Expect(w.c.Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: bindingName},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/24"}}})).To(Succeed())
	Expect(w.c.Create(ctx, &svcnetv1alpha1.ServiceCIDRBinding{
		ObjectMeta: metav1.ObjectMeta{Name: bindingName},
		Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{ServiceCIDRName: bindingName,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "nobody"}}},
	})).To(Succeed())
	for k := range kinds {
		for range 2 {
			w.addService(k)
		}
	}
	w.createForeign()
	return w
}

// createForeign creates what is not svcnet's: slices of another manager
// for a Service with a selector and one without, IPAddresses of another
// API group (upstream's IPAddress API conformance test), and Endpoints
// without a Service (upstream's Endpoints lifecycle test).
func (w *world) createForeign() {
	for _, svc := range []string{w.servicesOf(kindClusterIP)[0], w.servicesOf(kindSelectorless)[0]} {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: svc + "-by-hand", Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "by-hand.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.200"}}},
		}
		Expect(w.c.Create(w.ctx, s)).To(Succeed())
		w.foreign[foreignKey{"EndpointSlice", w.ns, s.Name}] = s.ResourceVersion
	}
	for _, ip := range []string{"255.255.255.255", "fe80::42:1dff:fe84:f9e2"} {
		ipa := &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: ip, Labels: map[string]string{"type": "foreign"}},
			Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"}},
		}
		Expect(w.c.Create(w.ctx, ipa)).To(Succeed())
		w.foreign[foreignKey{"IPAddress", "", ip}] = ipa.ResourceVersion
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "lonely", Labels: map[string]string{"test-endpoint-static": "true"}},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.24"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 80}}}},
	}
	Expect(w.c.Create(w.ctx, ep)).To(Succeed())
	w.foreign[foreignKey{"Endpoints", w.ns, ep.Name}] = ep.ResourceVersion
}

// servicesOf returns the names of the living Services of a kind, sorted.
func (w *world) servicesOf(k kind) []string {
	var out []string
	for name, sk := range w.services {
		if sk == k {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// sortedServices returns the names of the living Services, sorted.
func (w *world) sortedServices() []string {
	out := make([]string, 0, len(w.services))
	for name := range w.services {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// pick returns a random element of a sorted list, or "" for none.
func pick[T any](rnd *rand.Rand, list []T) (T, bool) {
	var zero T
	if len(list) == 0 {
		return zero, false
	}
	return list[rnd.Intn(len(list))], true
}

// step does one churn action.
func (w *world) step() {
	switch r := w.rnd.Intn(100); {
	case r < 30:
		w.addPod()
	case r < 45:
		w.deletePod()
	case r < 60:
		w.flipReady()
	case r < 68 && len(w.services) < maxServices:
		w.addService(kind(w.rnd.Intn(int(kinds))))
	case r < 74 && len(w.services) > minServices:
		w.deleteService()
	case r < 85:
		w.rewriteEndpoints()
	}
}

func (w *world) done(action string) { w.actions[action]++ }

// addService creates a Service of kind k, and for a selectorless one its
// Endpoints.
func (w *world) addService(k kind) {
	name := fmt.Sprintf("svc-%d", w.nextSvc)
	w.nextSvc++
	b := builder.Service(name, w.ns).Port("http", 80, intstr.FromString("http")).Port("metrics", 9100, intstr.FromInt32(9100)).
		Label(serviceLabel, "fault")
	switch k {
	case kindHeadless:
		b = b.Headless().Selector("app", name)
	case kindLoadBalancer:
		b = b.Type(corev1.ServiceTypeLoadBalancer).Selector("app", name)
	case kindSelectorless:
		b = builder.Service(name, w.ns).Port("http", 80, intstr.FromInt32(8080)).Label(serviceLabel, "fault")
	default:
		b = b.Selector("app", name)
	}
	Expect(w.c.Create(w.ctx, b.Obj())).To(Succeed())
	w.services[name] = k
	w.done("create Service")
	if k == kindSelectorless {
		w.writeEndpoints(name, true)
	}
}

func (w *world) deleteService() {
	name, _ := pick(w.rnd, w.sortedServices())
	Expect(client.IgnoreNotFound(w.c.Delete(w.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}))).To(Succeed())
	if w.services[name] == kindSelectorless {
		Expect(client.IgnoreNotFound(w.c.Delete(w.ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}}))).To(Succeed())
		delete(w.foreign, foreignKey{"Endpoints", w.ns, name})
	}
	delete(w.services, name)
	w.done("delete Service")
}

// addPod creates a Pod of a Service with a selector: ready or not, on one
// of the Nodes, with the named port on 8080 or 8081 (two port groups), a
// hostname under the Service as subdomain for some.
func (w *world) addPod() {
	var selected []string
	for _, name := range w.sortedServices() {
		if w.services[name] != kindSelectorless {
			selected = append(selected, name)
		}
	}
	app, ok := pick(w.rnd, selected)
	if !ok {
		return
	}
	n := w.nextPod
	w.nextPod++
	node, _ := pick(w.rnd, w.nodes)
	name := fmt.Sprintf("%s-pod-%d", app, n)
	b := builder.Pod(name, w.ns).Label("app", app).ContainerPort("http", int32(8080+w.rnd.Intn(2))).
		Node(node).IP(fmt.Sprintf("10.200.%d.%d", n/250, n%250+1))
	if w.rnd.Intn(10) < 7 {
		b = b.Ready()
	} else {
		b = b.NotReady()
	}
	if w.rnd.Intn(4) == 0 {
		b = b.Hostname(name, app)
	}
	Expect(env.CreatePod(w.ctx, b.Obj())).To(Succeed())
	w.done("create Pod")
}

func (w *world) pods() []corev1.Pod {
	var list corev1.PodList
	Expect(w.c.List(w.ctx, &list, client.InNamespace(w.ns))).To(Succeed())
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// deletePod deletes a Pod, at once or (a third of the time) gracefully:
// with no kubelet, a graceful deletion leaves it terminating.
func (w *world) deletePod() {
	pod, ok := pick(w.rnd, w.pods())
	if !ok {
		return
	}
	opts := []client.DeleteOption{client.GracePeriodSeconds(0)}
	if w.rnd.Intn(3) == 0 {
		opts = nil
	}
	Expect(client.IgnoreNotFound(w.c.Delete(w.ctx, &pod, opts...))).To(Succeed())
	w.done("delete Pod")
}

func (w *world) flipReady() {
	pod, ok := pick(w.rnd, w.pods())
	if !ok || len(pod.Status.Conditions) == 0 {
		return
	}
	c := &pod.Status.Conditions[0]
	c.Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse}[c.Status]
	if c.Status == "" {
		c.Status = corev1.ConditionTrue
	}
	c.LastTransitionTime = metav1.Now()
	if err := w.c.Status().Update(w.ctx, &pod); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	w.done("flip Pod readiness")
}

func (w *world) rewriteEndpoints() {
	name, ok := pick(w.rnd, w.servicesOf(kindSelectorless))
	if ok {
		w.writeEndpoints(name, false)
	}
}

// writeEndpoints writes the hand-written Endpoints of a selectorless
// Service: one to four addresses, some not ready.
func (w *world) writeEndpoints(name string, create bool) {
	sub := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "http", Port: 8080}}}
	for range 1 + w.rnd.Intn(4) {
		a := corev1.EndpointAddress{IP: fmt.Sprintf("192.0.2.%d", 1+w.rnd.Intn(150))}
		if w.rnd.Intn(4) == 0 {
			sub.NotReadyAddresses = append(sub.NotReadyAddresses, a)
		} else {
			sub.Addresses = append(sub.Addresses, a)
		}
	}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name}, Subsets: []corev1.EndpointSubset{sub}}
	if create {
		Expect(w.c.Create(w.ctx, ep)).To(Succeed())
	} else {
		// An unconditional update, as upstream's mirroring test does.
		Expect(w.c.Update(w.ctx, ep)).To(Succeed())
	}
	w.foreign[foreignKey{"Endpoints", w.ns, name}] = ep.ResourceVersion
	w.done("write Endpoints")
}
