// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// ControllerName is the --controllers name.
const ControllerName = "servicecidr"

// Finalizer is kube-controller-manager's, so the two are interchangeable.
const Finalizer = "networking.k8s.io/service-cidr-finalizer"

// DeletionGracePeriod is how long after the deletion request the finalizer
// stays, so that allocators stop handing out addresses from the range.
const DeletionGracePeriod = 10 * time.Second

// Condition messages and reasons, as kube-controller-manager writes them.
const (
	ReasonReady        = "Ready"
	MessageReady       = "Kubernetes Service CIDR is ready"
	ReasonTerminating  = networkingv1.ServiceCIDRReasonTerminating
	MessageTerminating = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
)

// Reconciler reconciles ServiceCIDRs.
type Reconciler struct {
	client client.Client
	// apiReader reads past the cache, for the field manager of a change
	// the controller repairs; nil reports none.
	apiReader client.Reader
	clock     clock.PassiveClock

	// finalized and conditions remember what the controller last wrote,
	// to tell another writer's change.
	finalized  repairs.Memo[bool]
	conditions repairs.Memo[[]metav1.Condition]
}

// repairKind is the kind its repairs are reported under.
const repairKind = "ServiceCIDR"

var _ reconcile.Reconciler = (*Reconciler)(nil)

// Option configures a Reconciler.
type Option func(*Reconciler)

// WithClock replaces the real clock (tests).
func WithClock(c clock.PassiveClock) Option { return func(r *Reconciler) { r.clock = c } }

// WithAPIReader reads past the cache for the field manager of a change the
// controller repairs.
func WithAPIReader(reader client.Reader) Option { return func(r *Reconciler) { r.apiReader = reader } }

// lastManager returns who last wrote obj, when it can be read.
func lastManager(ctx context.Context, reader client.Reader, obj client.Object) string {
	if reader == nil {
		return ""
	}
	return repairs.LastManagerOf(ctx, reader, obj)
}

// New returns a Reconciler that reads from and writes through c.
func New(c client.Client, opts ...Option) *Reconciler {
	r := &Reconciler{client: c, clock: clock.RealClock{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch

// SetupWithManager registers the controller: ServiceCIDRs, and the
// IPAddresses and other ServiceCIDRs that can unblock a deletion.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	repairs.Register()
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&networkingv1.ServiceCIDR{}).
		Watches(&networkingv1.IPAddress{}, handler.EnqueueRequestsFromMapFunc(r.cidrsContainingAddress)).
		Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(r.overlappingCIDRs)).
		Complete(r)
}

func (r *Reconciler) cidrsContainingAddress(ctx context.Context, obj client.Object) []reconcile.Request {
	addr, err := netip.ParseAddr(obj.GetName())
	if err != nil {
		return nil
	}
	var list networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			continue // only a deletion waits on addresses
		}
		for _, p := range prefixes(&list.Items[i]) {
			if p.Contains(addr) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
				break
			}
		}
	}
	return out
}

func (r *Reconciler) overlappingCIDRs(ctx context.Context, obj client.Object) []reconcile.Request {
	sc, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return nil
	}
	mine := prefixes(sc)
	var list networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name == sc.Name || o.DeletionTimestamp == nil {
			continue
		}
		if slices.ContainsFunc(prefixes(o), func(p netip.Prefix) bool {
			return slices.ContainsFunc(mine, p.Overlaps)
		}) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: o.Name}})
		}
	}
	return out
}

// Reconcile brings one ServiceCIDR's finalizer and Ready condition in line.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sc := &networkingv1.ServiceCIDR{}
	if err := r.client.Get(ctx, req.NamespacedName, sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sc.DeletionTimestamp != nil {
		return r.reconcileDelete(ctx, sc)
	}
	if !controllerutil.ContainsFinalizer(sc, Finalizer) {
		edited := r.finalized.ChangedByOther(sc.Name, sc.ResourceVersion, false)
		by := ""
		if edited {
			by = lastManager(ctx, r.apiReader, sc)
		}
		patch := client.MergeFrom(sc.DeepCopy())
		controllerutil.AddFinalizer(sc, Finalizer)
		if err := r.client.Patch(ctx, sc, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		r.finalized.Wrote(sc.Name, sc.ResourceVersion, true)
		if edited {
			repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKind, Object: klog.KObj(sc), Reason: repairs.ReasonEdited,
				What: "finalizer " + Finalizer + " removed", By: by})
		}
	}
	return ctrl.Result{}, r.setReady(ctx, sc, metav1.ConditionTrue, ReasonReady, MessageReady)
}

func (r *Reconciler) reconcileDelete(ctx context.Context, sc *networkingv1.ServiceCIDR) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(sc, Finalizer) {
		return ctrl.Result{}, nil
	}
	var all networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &all); err != nil {
		return ctrl.Result{}, err
	}
	var ips networkingv1.IPAddressList
	if err := r.client.List(ctx, &ips, client.MatchingLabels{networkingv1.LabelManagedBy: feed.ManagedBy}); err != nil {
		return ctrl.Result{}, err
	}
	addrs := make([]netip.Addr, 0, len(ips.Items))
	for i := range ips.Items {
		if a, err := netip.ParseAddr(ips.Items[i].Name); err == nil {
			addrs = append(addrs, a)
		}
	}
	if addr, blocked := blockingAddress(sc, all.Items, addrs); blocked {
		ctrl.LoggerFrom(ctx).V(1).Info("Deletion of ServiceCIDR blocked by IP address", "ipAddress", addr.String())
		return ctrl.Result{}, r.setReady(ctx, sc, metav1.ConditionFalse, ReasonTerminating, MessageTerminating)
	}
	if wait := DeletionGracePeriod - r.clock.Since(sc.DeletionTimestamp.Time); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	patch := client.MergeFrom(sc.DeepCopy())
	controllerutil.RemoveFinalizer(sc, Finalizer)
	if err := r.client.Patch(ctx, sc, patch); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed finalizer from ServiceCIDR")
	return ctrl.Result{}, nil
}

func (r *Reconciler) setReady(ctx context.Context, sc *networkingv1.ServiceCIDR, status metav1.ConditionStatus, reason, message string) error {
	conds := slices.Clone(sc.Status.Conditions)
	meta.SetStatusCondition(&conds, metav1.Condition{
		Type: networkingv1.ServiceCIDRConditionReady, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(r.clock.Now()),
	})
	if equality.Semantic.DeepEqual(conds, sc.Status.Conditions) {
		return nil
	}
	edited := r.conditions.ChangedByOther(sc.Name, sc.ResourceVersion, sc.Status.Conditions)
	by := ""
	if edited {
		by = lastManager(ctx, r.apiReader, sc)
	}
	patch := client.MergeFrom(sc.DeepCopy())
	sc.Status.Conditions = conds
	if err := r.client.Status().Patch(ctx, sc, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("setting Ready=%s on ServiceCIDR %s: %w", status, sc.Name, err)
	}
	r.conditions.Wrote(sc.Name, sc.ResourceVersion, sc.Status.Conditions)
	if edited {
		repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKind + " status", Object: klog.KObj(sc), Reason: repairs.ReasonEdited,
			What: "conditions", By: by})
	}
	return nil
}
