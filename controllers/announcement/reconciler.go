// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcement

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// ControllerName is the controller's --controllers name.
const ControllerName = "announcement"

// Reconciler keeps the Accepted condition of every
// LoadBalancerAnnouncement.
type Reconciler struct {
	client client.Client
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// New returns a Reconciler that reads and writes through c.
func New(c client.Client) *Reconciler { return &Reconciler{client: c} }

// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerannouncements,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerannouncements/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancerippools,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch

// SetupWithManager registers the controller: any announcement, pool label
// or node label change can start or end an overlap, so each enqueues every
// announcement.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list svcnetv1alpha1.LoadBalancerAnnouncementList
		if err := r.client.List(ctx, &list); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for i := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
		return out
	})
	labelsOrCreation := builder.WithPredicates(predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !equalLabels(e.ObjectOld, e.ObjectNew)
		},
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&svcnetv1alpha1.LoadBalancerAnnouncement{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&svcnetv1alpha1.LoadBalancerAnnouncement{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&svcnetv1alpha1.LoadBalancerIPPool{}, all, labelsOrCreation).
		Watches(&corev1.Node{}, all, labelsOrCreation).
		Complete(r)
}

func equalLabels(a, b client.Object) bool {
	return maps.Equal(a.GetLabels(), b.GetLabels())
}

// Reconcile judges all announcements and writes this one's verdict.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ann svcnetv1alpha1.LoadBalancerAnnouncement
	if err := r.client.Get(ctx, req.NamespacedName, &ann); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	verdicts, err := r.judgeAll(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	v, ok := verdicts[ann.Name]
	if !ok {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.writeStatus(ctx, &ann, v)
}

func (r *Reconciler) judgeAll(ctx context.Context) (map[string]announcementpolicy.Verdict, error) {
	var anns svcnetv1alpha1.LoadBalancerAnnouncementList
	if err := r.client.List(ctx, &anns); err != nil {
		return nil, fmt.Errorf("listing LoadBalancerAnnouncements: %w", err)
	}
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("listing LoadBalancerIPPools: %w", err)
	}
	var nodes corev1.NodeList
	if err := r.client.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	return announcementpolicy.Judge(pointers(anns.Items), pointers(pools.Items), pointers(nodes.Items)), nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// writeStatus patches the Accepted condition when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, ann *svcnetv1alpha1.LoadBalancerAnnouncement, v announcementpolicy.Verdict) error {
	patch := client.MergeFrom(ann.DeepCopy())
	status := metav1.ConditionFalse
	if v.Accepted {
		status = metav1.ConditionTrue
	}
	changed := apimeta.SetStatusCondition(&ann.Status.Conditions, metav1.Condition{
		Type: svcnetv1alpha1.AnnouncementConditionAccepted, Status: status, Reason: v.Reason, Message: v.Message,
		ObservedGeneration: ann.Generation,
	})
	if !changed && ann.Status.ObservedGeneration == ann.Generation {
		return nil
	}
	ann.Status.ObservedGeneration = ann.Generation
	if err := r.client.Status().Patch(ctx, ann, patch); err != nil {
		return fmt.Errorf("writing the status of LoadBalancerAnnouncement %s: %w", ann.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Judged LoadBalancerAnnouncement", "accepted", v.Accepted, "reason", v.Reason, "message", v.Message)
	return nil
}
