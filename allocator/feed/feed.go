// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package feed keeps svcnet's allocators in step with an informer
// cache: allocator/ipam with ServiceCIDRs and IPAddresses, allocator/portrange
// with the nodePorts of Services. The admission webhook uses them to choose,
// the audit controllers to measure.
package feed

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/svcnet-io/svcnet/allocator/ipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

// ManagedBy is the label value kube-apiserver's allocator puts on the
// IPAddress objects of the ClusterIPs it commits.
const ManagedBy = "ipallocator.k8s.io"

// ToCIDR converts a ServiceCIDR: usable when Ready (or not yet judged by a
// controller) and not being deleted.
func ToCIDR(sc *networkingv1.ServiceCIDR) ipam.CIDR {
	c := ipam.CIDR{Name: sc.Name, Created: sc.CreationTimestamp.Time}
	for _, s := range sc.Spec.CIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			c.Prefixes = append(c.Prefixes, p)
		}
	}
	ready := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
	c.Usable = sc.DeletionTimestamp == nil && (ready == nil || ready.Status == metav1.ConditionTrue)
	return c
}

// CIDRHandler feeds ServiceCIDRs to a; also, when set, sees each one after
// a has (deleted: the ServiceCIDR is gone).
func CIDRHandler(a *ipam.Allocator, also func(sc *networkingv1.ServiceCIDR, deleted bool)) toolscache.ResourceEventHandler {
	set := func(obj any) {
		sc, ok := obj.(*networkingv1.ServiceCIDR)
		if !ok {
			return
		}
		_ = a.SetCIDR(ToCIDR(sc)) // unusable prefixes are skipped; kube-apiserver validates them
		if also != nil {
			also(sc, false)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if sc, ok := tombstone.As[*networkingv1.ServiceCIDR](obj); ok {
				a.DeleteCIDR(sc.Name)
				if also != nil {
					also(sc, true)
				}
			}
		},
	}
}

// Owner is the namespace/name an IPAddress's parentRef names.
func Owner(ip *networkingv1.IPAddress) string {
	if ref := ip.Spec.ParentRef; ref != nil {
		return types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}.String()
	}
	return ""
}

// AddressHandler feeds IPAddresses to a: present ones are used, deleted
// ones released, unless held (when set) says a Service still holds the
// address: someone deleted the IPAddress of a live Service, and the address
// must not go to another Service while the repair recreates it.
func AddressHandler(a *ipam.Allocator, held func(addr string) bool) toolscache.ResourceEventHandler {
	observe := func(obj any) {
		ip, ok := obj.(*networkingv1.IPAddress)
		if !ok {
			return
		}
		if addr, err := netip.ParseAddr(ip.Name); err == nil {
			a.Observe(addr, Owner(ip))
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(obj any) {
			ip, ok := tombstone.As[*networkingv1.IPAddress](obj)
			if !ok || (held != nil && held(ip.Name)) {
				return
			}
			if addr, err := netip.ParseAddr(ip.Name); err == nil {
				a.Forget(addr)
			}
		},
	}
}

// ServiceAddressHandler keeps the ClusterIPs of Services used in a while a
// Service holds them, whether or not their IPAddress exists, and releases
// those a Service lets go of once no IPAddress holds them (exists), so that
// the last of the two to go releases the address.
func ServiceAddressHandler(a *ipam.Allocator, exists func(addr string) bool) toolscache.ResourceEventHandler {
	observe := func(obj any) {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		for _, ip := range svc.Spec.ClusterIPs {
			if addr, err := netip.ParseAddr(ip); err == nil {
				a.Observe(addr, ServiceKey(svc))
			}
		}
	}
	release := func(svc *corev1.Service, keep []string) {
		for _, ip := range svc.Spec.ClusterIPs {
			if slices.Contains(keep, ip) || exists(ip) {
				continue
			}
			if addr, err := netip.ParseAddr(ip); err == nil {
				a.Forget(addr)
			}
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: observe,
		UpdateFunc: func(oldObj, newObj any) {
			oldSvc, ok1 := oldObj.(*corev1.Service)
			newSvc, ok2 := newObj.(*corev1.Service)
			if ok1 && ok2 {
				release(oldSvc, newSvc.Spec.ClusterIPs)
			}
			observe(newObj)
		},
		DeleteFunc: func(obj any) {
			if svc, ok := tombstone.As[*corev1.Service](obj); ok {
				release(svc, nil)
			}
		},
	}
}

// Tenancy says which ServiceCIDRs bindings give to
// a namespace with these labels, and which they keep from it. A binding
// whose selector is invalid binds nothing (its status says why).
func Tenancy(bindings []svcnetv1alpha1.ServiceCIDRBinding, nsLabels map[string]string) (bound, denied []string) {
	set := labels.Set(nsLabels)
	for i := range bindings {
		b := &bindings[i]
		sel, err := metav1.LabelSelectorAsSelector(&b.Spec.NamespaceSelector)
		if err != nil {
			continue
		}
		switch {
		case sel.Matches(set):
			bound = append(bound, b.Spec.ServiceCIDRName)
		case b.Spec.Exclusive:
			denied = append(denied, b.Spec.ServiceCIDRName)
		}
	}
	denied = slices.DeleteFunc(denied, func(n string) bool { return slices.Contains(bound, n) })
	return bound, denied
}

// ServiceKey is the owner key of svc's addresses and ports in the
// allocators, its "namespace/name", as Owner reads it from an
// IPAddress's parentRef.
func ServiceKey(svc *corev1.Service) string {
	return types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}.String()
}
