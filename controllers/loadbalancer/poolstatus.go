// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// setupPoolController registers the pool status controller.
func setupPoolController(mgr ctrl.Manager, p *poolReconciler) error {
	c := p.r.client
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName+"-pool").
		// A pool's spec change can end or start another's overlap; a status
		// change that svcnet did not write is put back.
		Watches(&svcnetv1alpha1.LoadBalancerIPPool{}, allPools(c), builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, statusChanged))).
		Watches(&networkingv1.ServiceCIDR{}, allPools(c)).
		// Any IPAddress in a pool takes an address, whoever manages it.
		Watches(&networkingv1.IPAddress{}, allPools(c), builder.WithPredicates(predicate.NewPredicateFuncs(func(obj client.Object) bool {
			a, err := netip.ParseAddr(obj.GetName())
			return err == nil && len(p.r.alloc.PoolsOf(a)) > 0
		}))).
		Complete(p)
}

// allPools enqueues every pool: overlap and usage are judged across pools.
func allPools(c client.Client) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list svcnetv1alpha1.LoadBalancerIPPoolList
		if err := c.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
		return out
	})
}

// statusChanged passes pool updates whose status changed.
var statusChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*svcnetv1alpha1.LoadBalancerIPPool)
		n, ok2 := e.ObjectNew.(*svcnetv1alpha1.LoadBalancerIPPool)
		return ok1 && ok2 && !equality.Semantic.DeepEqual(o.Status, n.Status)
	},
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// poolReconciler keeps each pool's status: Ready, capacity, allocated.
type poolReconciler struct{ r *Reconciler }

func (p *poolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pool svcnetv1alpha1.LoadBalancerIPPool
	if err := p.r.client.Get(ctx, req.NamespacedName, &pool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	states, err := p.r.poolStates(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	st := states[pool.Name]
	if st == nil {
		return ctrl.Result{}, nil
	}
	allocated, err := p.allocated(ctx, pool.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The allocator may not have seen this generation yet: count from the
	// ranges the spec has now.
	capacity := lbipam.Capacity(st.ranges, pool.Spec.AvoidBuggyIPs)
	have := pool.Status.DeepCopy()
	patch := client.MergeFrom(pool.DeepCopy())
	status := metav1.ConditionFalse
	if st.ready {
		status = metav1.ConditionTrue
	}
	changed := apimeta.SetStatusCondition(&pool.Status.Conditions, metav1.Condition{
		Type: "Ready", Status: status, Reason: st.reason, Message: st.message, ObservedGeneration: pool.Generation,
	})
	want := svcnetv1alpha1.LoadBalancerIPPoolStatus{Capacity: capacityString(capacity), Allocated: allocated, ObservedGeneration: pool.Generation}
	if changed || pool.Status.Capacity != want.Capacity || pool.Status.Allocated != want.Allocated || pool.Status.ObservedGeneration != want.ObservedGeneration {
		edited := p.r.poolStatuses.ChangedByOther(pool.Name, pool.ResourceVersion, *have)
		by := ""
		if edited {
			by = repairs.LastManagerOf(ctx, p.r.apiReader, &pool)
		}
		pool.Status.Capacity, pool.Status.Allocated, pool.Status.ObservedGeneration = want.Capacity, want.Allocated, want.ObservedGeneration
		if err := p.r.client.Status().Patch(ctx, &pool, patch); err != nil {
			return ctrl.Result{}, err
		}
		p.r.poolStatuses.Wrote(pool.Name, pool.ResourceVersion, pool.Status)
		if edited {
			repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKindPool, Object: klog.KObj(&pool), Reason: repairs.ReasonEdited,
				What: describePoolStatus(*have, pool.Status), By: by})
		}
	}
	return ctrl.Result{}, nil
}

// allocated counts the IPAddresses, whoever manages them, whose address
// lies in a pool. It reads the cache, which an IPAddress event that
// triggered the sync has reached, where the allocator, fed by another
// handler of the same informer, may not have yet.
func (p *poolReconciler) allocated(ctx context.Context, pool string) (int64, error) {
	var list networkingv1.IPAddressList
	if err := p.r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	var n int64
	for i := range list.Items {
		if a, err := netip.ParseAddr(list.Items[i].Name); err == nil && slices.Contains(p.r.alloc.PoolsOf(a), pool) {
			n++
		}
	}
	return n, nil
}

// describePoolStatus says which fields of a pool's status differ.
func describePoolStatus(a, b svcnetv1alpha1.LoadBalancerIPPoolStatus) string {
	var parts []string
	if a.Capacity != b.Capacity {
		parts = append(parts, fmt.Sprintf("capacity %q instead of %q", a.Capacity, b.Capacity))
	}
	if a.Allocated != b.Allocated {
		parts = append(parts, fmt.Sprintf("allocated %d instead of %d", a.Allocated, b.Allocated))
	}
	if a.ObservedGeneration != b.ObservedGeneration {
		parts = append(parts, "observedGeneration")
	}
	if !equality.Semantic.DeepEqual(a.Conditions, b.Conditions) {
		parts = append(parts, "conditions")
	}
	return strings.Join(parts, "; ")
}
