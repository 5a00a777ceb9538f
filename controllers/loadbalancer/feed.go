package loadbalancer

import (
	"context"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
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
			if ipa, ok := tombstone.As[*networkingv1.IPAddress](obj); ok && ipa.Labels[networkingv1.LabelManagedBy] == ManagedBy {
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

func (r *Reconciler) observe(obj any) {
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok || ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy || ipa.Spec.ParentRef == nil {
		return
	}
	if a, err := netip.ParseAddr(ipa.Name); err == nil {
		r.alloc.Observe(a, ipa.Spec.ParentRef.Namespace+"/"+ipa.Spec.ParentRef.Name)
	}
}
