// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/controllers/endpointslicemirroring"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
)

// disruptor is someone else writing the objects svcnet owns: kubectl
// delete and edit, a backup restored with old content, a tool that takes
// objects over. It writes as its own field manager.
type disruptor struct {
	w *world
	c client.Client
	// ghosts counts the Services slices were relabelled to.
	ghosts int
}

func newDisruptor(w *world) *disruptor {
	return &disruptor{w: w, c: client.WithFieldOwner(env.Client, "disruptor")}
}

// ignore tolerates the errors of racing the controllers.
func ignore(err error) {
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// step does one disruption.
func (d *disruptor) step() {
	switch r := d.w.rnd.Intn(100); {
	case r < 45:
		d.slice()
	case r < 60:
		d.clusterIPAddress()
	case r < 72:
		d.loadBalancerIPAddress()
	case r < 84:
		d.loadBalancerStatus()
	case r < 92:
		d.poolStatus()
	default:
		d.bindingStatus()
	}
}

// ownedSlices lists the slices svcnet's two controllers own in the world's
// namespace, sorted by name.
func (d *disruptor) ownedSlices() []discoveryv1.EndpointSlice {
	var list discoveryv1.EndpointSliceList
	Expect(d.c.List(d.w.ctx, &list, client.InNamespace(d.w.ns))).To(Succeed())
	var out []discoveryv1.EndpointSlice
	for _, s := range list.Items {
		if endpointslice.Owns(&s) || endpointslicemirroring.Owns(&s) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// slice deletes or edits one of svcnet's slices.
func (d *disruptor) slice() {
	s, ok := pick(d.w.rnd, d.ownedSlices())
	if !ok {
		return
	}
	action := d.w.rnd.Intn(9)
	if action == 0 {
		ignore(d.c.Delete(d.w.ctx, &s))
		d.w.done("disrupt: delete EndpointSlice")
		return
	}
	if action == 8 {
		d.restoreStale(s)
		return
	}
	name := d.editSlice(&s, action)
	err := d.c.Update(d.w.ctx, &s)
	ignore(err)
	d.w.done("disrupt: EndpointSlice " + name)
	if name == "steal" && err == nil {
		// Another manager's now: it must stay as it is.
		d.w.foreign[foreignKey{"EndpointSlice", s.Namespace, s.Name}] = s.ResourceVersion
	}
}

// editSlice changes s as action says and names the change.
func (d *disruptor) editSlice(s *discoveryv1.EndpointSlice, action int) string {
	s.Labels = maps.Clone(s.Labels)
	switch action {
	case 1:
		if len(s.Endpoints) > 0 {
			s.Endpoints = s.Endpoints[1:]
		}
		return "drop an endpoint"
	case 2:
		for i := range s.Endpoints {
			s.Endpoints[i].Conditions.Ready = ptr.To(!ptr.Deref(s.Endpoints[i].Conditions.Ready, false))
		}
		return "flip readiness"
	case 3:
		for i := range s.Ports {
			s.Ports[i].Port = ptr.To(ptr.Deref(s.Ports[i].Port, 0) + 1000)
		}
		return "change ports"
	case 4:
		s.OwnerReferences = nil
		return "remove ownerReferences"
	case 5:
		delete(s.Labels, serviceLabel)
		s.Labels["added-by-hand"] = "true"
		return "edit labels"
	case 6:
		s.Labels[discoveryv1.LabelManagedBy] = "stolen.example.com"
		return "steal"
	default:
		s.Labels[discoveryv1.LabelServiceName] = fmt.Sprintf("ghost-%d", d.ghosts)
		d.ghosts++
		return "relabel to a Service that does not exist"
	}
}

// restoreStale deletes a slice and creates it again under the same name
// with content of long ago, as a backup restore does.
func (d *disruptor) restoreStale(s discoveryv1.EndpointSlice) {
	ignore(d.c.Delete(d.w.ctx, &s))
	stale := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: s.Labels, Annotations: s.Annotations, OwnerReferences: s.OwnerReferences},
		AddressType: s.AddressType,
		Ports:       s.Ports,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.255.255.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	ignore(d.c.Create(d.w.ctx, stale))
	d.w.done("disrupt: restore an EndpointSlice with stale content")
}

// addresses lists the IPAddresses managed by managedBy, sorted.
func (d *disruptor) addresses(managedBy string) []networkingv1.IPAddress {
	var list networkingv1.IPAddressList
	Expect(d.c.List(d.w.ctx, &list, client.MatchingLabels{networkingv1.LabelManagedBy: managedBy})).To(Succeed())
	var out []networkingv1.IPAddress
	for _, ipa := range list.Items {
		if ipa.Spec.ParentRef != nil && ipa.Spec.ParentRef.Namespace == d.w.ns {
			out = append(out, ipa)
		}
	}
	slices.SortFunc(out, func(a, b networkingv1.IPAddress) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// clusterIPAddress deletes the IPAddress of a ClusterIP or strips its
// labels.
func (d *disruptor) clusterIPAddress() {
	ipa, ok := pick(d.w.rnd, d.addresses(ipaddress.ManagedBy))
	if !ok {
		return
	}
	if d.w.rnd.Intn(2) == 0 {
		ignore(d.c.Delete(d.w.ctx, &ipa))
		d.w.done("disrupt: delete ClusterIP IPAddress")
		return
	}
	ipa.Labels = map[string]string{"edited": "by-hand"}
	ignore(d.c.Update(d.w.ctx, &ipa))
	d.w.done("disrupt: strip ClusterIP IPAddress labels")
}

// loadBalancerIPAddress deletes the IPAddress of a LoadBalancer IP or
// removes its managed-by label.
func (d *disruptor) loadBalancerIPAddress() {
	ipa, ok := pick(d.w.rnd, d.addresses(loadbalancer.ManagedBy))
	if !ok {
		return
	}
	if d.w.rnd.Intn(2) == 0 {
		ignore(d.c.Delete(d.w.ctx, &ipa))
		d.w.done("disrupt: delete LoadBalancer IPAddress")
		return
	}
	ipa.Labels = maps.Clone(ipa.Labels)
	delete(ipa.Labels, networkingv1.LabelManagedBy)
	ignore(d.c.Update(d.w.ctx, &ipa))
	d.w.done("disrupt: strip LoadBalancer IPAddress managed-by")
}

// loadBalancerStatus clears a LoadBalancer Service's ingress or points it
// at an address outside the pool.
func (d *disruptor) loadBalancerStatus() {
	name, ok := pick(d.w.rnd, d.w.servicesOf(kindLoadBalancer))
	if !ok {
		return
	}
	var svc corev1.Service
	if err := d.c.Get(d.w.ctx, client.ObjectKey{Namespace: d.w.ns, Name: name}, &svc); err != nil {
		ignore(err)
		return
	}
	svc.Status.LoadBalancer.Ingress = nil
	if d.w.rnd.Intn(2) == 0 {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.99"}}
	}
	ignore(d.c.Status().Update(d.w.ctx, &svc))
	d.w.done("disrupt: edit status.loadBalancer")
}

func (d *disruptor) poolStatus() {
	var p svcnetv1alpha1.LoadBalancerIPPool
	Expect(d.c.Get(d.w.ctx, client.ObjectKey{Name: poolName}, &p)).To(Succeed())
	p.Status.Allocated = 999
	p.Status.Conditions = nil
	ignore(d.c.Status().Update(d.w.ctx, &p))
	d.w.done("disrupt: edit LoadBalancerIPPool status")
}

func (d *disruptor) bindingStatus() {
	var b svcnetv1alpha1.ServiceCIDRBinding
	Expect(d.c.Get(d.w.ctx, client.ObjectKey{Name: bindingName}, &b)).To(Succeed())
	b.Status.Namespaces = 99
	ignore(d.c.Status().Update(d.w.ctx, &b))
	d.w.done("disrupt: edit ServiceCIDRBinding status")
}
