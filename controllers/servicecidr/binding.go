// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package servicecidr

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// BindingControllerName names the status controller of ServiceCIDRBindings;
// it runs with the servicecidr controller.
const BindingControllerName = "servicecidrbinding"

// BindingReconciler keeps ServiceCIDRBinding status: Ready and the number
// of namespaces selected.
type BindingReconciler struct {
	client    client.Client
	apiReader client.Reader
	clock     clock.PassiveClock
	// statuses remembers what the controller last wrote, to tell another
	// writer's change.
	statuses repairs.Memo[svcnetv1alpha1.ServiceCIDRBindingStatus]
}

// NewBinding returns a BindingReconciler.
func NewBinding(c client.Client, opts ...Option) *BindingReconciler {
	r := New(c, opts...)
	return &BindingReconciler{client: r.client, apiReader: r.apiReader, clock: r.clock}
}

// +kubebuilder:rbac:groups=networking.svcnet.io,resources=servicecidrbindings,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=servicecidrbindings/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// SetupWithManager registers the controller.
func (r *BindingReconciler) SetupWithManager(mgr ctrl.Manager) error {
	repairs.Register()
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list svcnetv1alpha1.ServiceCIDRBindingList
		if err := r.client.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(BindingControllerName).
		For(&svcnetv1alpha1.ServiceCIDRBinding{}).
		Watches(&networkingv1.ServiceCIDR{}, all).
		Watches(&corev1.Namespace{}, all).
		Complete(r)
}

// bindingStatus computes the status of b from what exists.
func bindingStatus(b *svcnetv1alpha1.ServiceCIDRBinding, sc *networkingv1.ServiceCIDR, namespaces []corev1.Namespace) (metav1.Condition, int32) {
	cond := metav1.Condition{Type: svcnetv1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: b.Generation}
	sel, err := metav1.LabelSelectorAsSelector(&b.Spec.NamespaceSelector)
	if err != nil {
		cond.Reason, cond.Message = svcnetv1alpha1.ReasonInvalidSelector, err.Error()
		return cond, 0
	}
	var n int32
	for i := range namespaces {
		if sel.Matches(labels.Set(namespaces[i].Labels)) {
			n++
		}
	}
	switch {
	case sc == nil:
		cond.Reason = svcnetv1alpha1.ReasonServiceCIDRNotFound
		cond.Message = fmt.Sprintf("ServiceCIDR %s does not exist; the selected namespaces get ClusterIPs from the other ServiceCIDRs", b.Spec.ServiceCIDRName)
	case sc.DeletionTimestamp != nil || !meta.IsStatusConditionTrue(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady):
		cond.Reason = svcnetv1alpha1.ReasonServiceCIDRNotReady
		cond.Message = fmt.Sprintf("ServiceCIDR %s is not Ready or is being deleted", b.Spec.ServiceCIDRName)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, svcnetv1alpha1.ReasonBound
		cond.Message = fmt.Sprintf("ServiceCIDR %s serves %d namespace(s)", b.Spec.ServiceCIDRName, n)
	}
	return cond, n
}

// Reconcile updates one binding's status.
func (r *BindingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &svcnetv1alpha1.ServiceCIDRBinding{}
	if err := r.client.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var sc *networkingv1.ServiceCIDR
	got := &networkingv1.ServiceCIDR{}
	switch err := r.client.Get(ctx, client.ObjectKey{Name: b.Spec.ServiceCIDRName}, got); {
	case err == nil:
		sc = got
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, err
	}
	var namespaces corev1.NamespaceList
	if err := r.client.List(ctx, &namespaces); err != nil {
		return ctrl.Result{}, err
	}
	cond, n := bindingStatus(b, sc, namespaces.Items)
	cond.LastTransitionTime = metav1.NewTime(r.clock.Now())
	status := b.Status.DeepCopy()
	status.Conditions = slices.Clone(status.Conditions)
	meta.SetStatusCondition(&status.Conditions, cond)
	status.Namespaces = n
	status.ObservedGeneration = b.Generation
	if equality.Semantic.DeepEqual(*status, b.Status) {
		return ctrl.Result{}, nil
	}
	edited := r.statuses.ChangedByOther(b.Name, b.ResourceVersion, b.Status)
	by := ""
	if edited {
		by = lastManager(ctx, r.apiReader, b)
	}
	patch := client.MergeFrom(b.DeepCopy())
	b.Status = *status
	if err := r.client.Status().Patch(ctx, b, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.statuses.Wrote(b.Name, b.ResourceVersion, b.Status)
	if edited {
		repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: "ServiceCIDRBinding status", Object: klog.KObj(b), Reason: repairs.ReasonEdited,
			What: fmt.Sprintf("namespaces %d, conditions", b.Status.Namespaces), By: by})
	}
	return ctrl.Result{}, nil
}
