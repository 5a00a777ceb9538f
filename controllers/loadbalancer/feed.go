// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

// feedAllocator keeps the allocator in step with the informer caches: the
// pools, and the addresses svcnet's IPAddresses hold.
func (r *Reconciler) feedAllocator(ctx context.Context, mgr ctrl.Manager) error {
	pools, err := mgr.GetCache().GetInformer(ctx, &svcnetv1alpha1.LoadBalancerIPPool{})
	if err != nil {
		return err
	}
	if _, err := pools.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.setPool(obj) },
		UpdateFunc: func(_, obj any) { r.setPool(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := tombstone.As[*svcnetv1alpha1.LoadBalancerIPPool](obj); ok {
				r.forgetPool(p.Name, p.UID)
			}
		},
	}); err != nil {
		return err
	}
	addrs, err := mgr.GetCache().GetInformer(ctx, &networkingv1.IPAddress{})
	if err != nil {
		return err
	}
	_, err = addrs.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj) },
		UpdateFunc: func(_, obj any) { r.observe(obj) },
		DeleteFunc: func(obj any) {
			if ipa, ok := tombstone.As[*networkingv1.IPAddress](obj); ok {
				if a, err := netip.ParseAddr(ipa.Name); err == nil {
					r.alloc.Forget(a)
				}
			}
		},
	})
	return err
}

func (r *Reconciler) setPool(obj any) {
	if p, ok := obj.(*svcnetv1alpha1.LoadBalancerIPPool); ok {
		r.feedPool(p)
	}
}

// observe marks the address of every IPAddress used, whoever manages it:
// the API server takes each name once, so no Service can have it while
// the object exists.
func (r *Reconciler) observe(obj any) {
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	if a, err := netip.ParseAddr(ipa.Name); err == nil {
		r.alloc.Observe(a, holder(ipa))
	}
}

// holder names, in the allocator, whom an IPAddress holds its address for:
// a Service's namespace/name when the IPAddress is svcnet's (or a
// Service's whose managed-by someone removed, which svcnet puts back), and
// the manager and parent otherwise.
func holder(ipa *networkingv1.IPAddress) string {
	ref := ipa.Spec.ParentRef
	managedBy := ipa.Labels[networkingv1.LabelManagedBy]
	switch {
	case ref == nil:
		return managedBy + ": no parent"
	case ref.Group == "" && ref.Resource == "services" && (managedBy == ManagedBy || managedBy == ""):
		return types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}.String()
	default:
		return fmt.Sprintf("%s: %s.%s %s/%s", managedBy, ref.Resource, ref.Group, ref.Namespace, ref.Name)
	}
}
