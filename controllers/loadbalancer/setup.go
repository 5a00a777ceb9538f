// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerippools,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerippools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ownLabel reports whether an IPAddress is labelled svcnet's, or not
// labelled at all (svcnet's, if its address is in a pool, with the label
// removed by hand).
func ownLabel(ipa *networkingv1.IPAddress) bool {
	managedBy := ipa.Labels[networkingv1.LabelManagedBy]
	return managedBy == ManagedBy || managedBy == ""
}

// indexes are the controller's field indexes.
var indexes = []struct {
	obj  client.Object
	name string
	fn   client.IndexerFunc
}{
	{&networkingv1.IPAddress{}, parentIndex, func(obj client.Object) []string {
		// svcnet's, and those whose managed-by someone removed (held
		// keeps those of its pools).
		ipa := obj.(*networkingv1.IPAddress)
		if !ownLabel(ipa) || ipa.Spec.ParentRef == nil || ipa.Spec.ParentRef.Group != "" || ipa.Spec.ParentRef.Resource != "services" {
			return nil
		}
		return []string{types.NamespacedName{Namespace: ipa.Spec.ParentRef.Namespace, Name: ipa.Spec.ParentRef.Name}.String()}
	}},
	{&corev1.Service{}, ingressIndex, func(obj client.Object) []string {
		var out []string
		for _, ing := range obj.(*corev1.Service).Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				out = append(out, ing.IP)
			}
		}
		return out
	}},
	{&corev1.Service{}, sharingIndex, func(obj client.Object) []string {
		if k := sharingKey(obj.(*corev1.Service)); k != "" {
			return []string{k}
		}
		return nil
	}},
}

// SetupWithManager registers the Service controller, the pool status
// controller, the controller of the Services' announcement condition and
// the pool metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	for _, ix := range indexes {
		if err := idx.IndexField(ctx, ix.obj, ix.name, ix.fn); err != nil {
			return err
		}
	}
	if err := r.feedAllocator(ctx, mgr); err != nil {
		return err
	}
	registerMetrics(r.alloc, mgr.GetCache())
	repairs.Register()
	if r.opts.ValidatePools {
		// Read live, not from the cache: two overlapping pools applied
		// together would both pass a cache that has not seen the first yet.
		// Pools are few and written rarely.
		mgr.GetWebhookServer().Register(PoolWebhookPath, &webhook.Admission{Handler: NewPoolValidator(mgr.GetAPIReader(), admission.NewDecoder(mgr.GetScheme()))})
	}
	if err := r.setupServiceController(mgr); err != nil {
		return err
	}
	if err := setupAnnouncedController(mgr, &announcedReconciler{client: r.client}); err != nil {
		return err
	}
	return setupPoolController(mgr, &poolReconciler{r})
}

// setupServiceController watches LoadBalancer Services (and the ones that
// were, to release), their IPAddresses, and what can make a Pending
// Service servable or a held address leave every pool.
func (r *Reconciler) setupServiceController(mgr ctrl.Manager) error {
	services := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return r.handles(e.Object.(*corev1.Service)) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return r.handles(e.ObjectOld.(*corev1.Service)) || r.handles(e.ObjectNew.(*corev1.Service))
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	parent := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		ipa := obj.(*networkingv1.IPAddress)
		if !ownLabel(ipa) || ipa.Spec.ParentRef == nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: ipa.Spec.ParentRef.Namespace, Name: ipa.Spec.ParentRef.Name}}}
	})
	allLoadBalancers := handler.EnqueueRequestsFromMapFunc(r.allLoadBalancers)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&corev1.Service{}, builder.WithPredicates(services)).
		Watches(&networkingv1.IPAddress{}, parent).
		// Only spec changes: a pool's status moves with every allocation.
		Watches(&svcnetv1alpha1.LoadBalancerIPPool{}, allLoadBalancers, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&networkingv1.ServiceCIDR{}, allLoadBalancers).
		Watches(&corev1.Namespace{}, allLoadBalancers, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

// allLoadBalancers enqueues every Service the controller handles: a pool,
// ServiceCIDR or namespace label change can concern any of them.
func (r *Reconciler) allLoadBalancers(ctx context.Context, _ client.Object) []reconcile.Request {
	var list corev1.ServiceList
	if err := r.client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if r.handles(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
