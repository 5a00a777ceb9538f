// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipaddress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/ipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/auditevents"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// ControllerName is the --controllers name.
const ControllerName = "ipaddress"

// ReportingController is the reportingController of its Events.
const ReportingController = "svcnet-" + ControllerName

// clusterIPIndex indexes Services by each of their ClusterIPs.
const clusterIPIndex = "svcnet.io/clusterip"

// ManagedBy is the IPAddress label value of kube-apiserver's allocator.
// The controller writes and deletes only IPAddresses that carry it, besides
// restoring the labels of one whose parentRef names the Service holding
// its address; every other IPAddress belongs to another manager.
const ManagedBy = feed.ManagedBy

// repairKind is the kind its repairs are reported under.
const repairKind = "IPAddress"

// DefaultLeakGracePeriod is how old an IPAddress without its Service must
// be to be called leaked, as in kube-apiserver: it creates the IPAddress
// before it stores the Service, and gives up on a request after 60 s.
const DefaultLeakGracePeriod = 60 * time.Second

// Event reasons (kube-apiserver's, plus svcnet's own).
const (
	ReasonOutOfRange       = "ClusterIPOutOfRange"
	ReasonNotAllocated     = "ClusterIPNotAllocated"
	ReasonAlreadyAllocated = "ClusterIPAlreadyAllocated"
	ReasonAddrNotAllocated = "IPAddressNotAllocated"
	ReasonWrongReference   = "IPAddressWrongReference"
	ReasonExclusive        = "ClusterIPInExclusiveServiceCIDR"
	ReasonExhausted        = "ServiceCIDRExhausted"

	actionClusterIP = "ClusterIPAllocation"
	actionIPAddress = "IPAddressAllocation"
)

// Options configure the audit.
type Options struct {
	// EventQuietPeriod: an Event repeats for the same object and reason no
	// more often than this (--audit-event-quiet-period, shared with the
	// nodeport audit).
	EventQuietPeriod time.Duration
	// LeakGracePeriod: an IPAddress whose Service does not hold it is
	// deleted only once it is this old.
	LeakGracePeriod time.Duration
}

// DefaultOptions are the defaults of `svcnet manager`.
func DefaultOptions() Options {
	return Options{EventQuietPeriod: 10 * time.Minute, LeakGracePeriod: DefaultLeakGracePeriod}
}

// Reconciler audits one Service (request with a namespace) or one IPAddress
// (request without).
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	events    *auditevents.Recorder
	clock     clock.PassiveClock
	usage     *ipam.Allocator // usage per ServiceCIDR, for metrics and exhaustion
	grace     time.Duration
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// Option configures a Reconciler.
type Option func(*Reconciler)

// WithClock replaces the real clock (tests).
func WithClock(c clock.PassiveClock) Option { return func(r *Reconciler) { r.clock = c } }

// New returns a Reconciler. apiReader reads past the cache, to confirm a
// finding before acting on it.
func New(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts Options, options ...Option) *Reconciler {
	r := &Reconciler{client: c, apiReader: apiReader, clock: clock.RealClock{}, grace: opts.LeakGracePeriod}
	for _, o := range options {
		o(r)
	}
	r.events = auditevents.New(recorder, r.clock, opts.EventQuietPeriod, auditevents.WithHistory(apiReader, ReportingController))
	r.usage = ipam.New(ipam.Options{Clock: r.clock})
	return r
}

// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.svcnet.io,resources=servicecidrbindings,verbs=get;list;watch

// SetupWithManager registers the controller and its usage metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	usage := feed.AddressHandler(r.usage, nil)
	// Check for exhaustion once the usage includes the new address (the
	// controller's own queue may run before this handler).
	addresses := toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			usage.OnAdd(obj, initial)
			if ip, ok := obj.(*networkingv1.IPAddress); ok && !initial {
				r.checkExhausted(ctx, ip.Name)
			}
		},
		UpdateFunc: usage.OnUpdate,
		DeleteFunc: usage.OnDelete,
	}
	for obj, h := range map[client.Object]toolscache.ResourceEventHandler{
		&networkingv1.ServiceCIDR{}: feed.CIDRHandler(r.usage, nil),
		&networkingv1.IPAddress{}:   addresses,
	} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	registerUsage(r.usage)
	repairs.Register()
	services := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	})
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, clusterIPIndex, func(obj client.Object) []string {
		return obj.(*corev1.Service).Spec.ClusterIPs
	}); err != nil {
		return err
	}
	// An IPAddress event audits the address, the Service it names and the
	// Services that hold the IP: a deleted IPAddress leaves them without one.
	addressAndServices := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		out := []reconcile.Request{{NamespacedName: client.ObjectKey{Name: obj.GetName()}}}
		if ip, ok := obj.(*networkingv1.IPAddress); ok && ip.Spec.ParentRef != nil && ip.Spec.ParentRef.Namespace != "" {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ip.Spec.ParentRef.Namespace, Name: ip.Spec.ParentRef.Name}})
		}
		var holders corev1.ServiceList
		if err := r.client.List(ctx, &holders, client.MatchingFields{clusterIPIndex: obj.GetName()}); err == nil {
			for i := range holders.Items {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&holders.Items[i])})
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&networkingv1.IPAddress{}, addressAndServices).
		Watches(&corev1.Service{}, services).
		Watches(&svcnetv1alpha1.ServiceCIDRBinding{}, handler.EnqueueRequestsFromMapFunc(r.allServices),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Only a ServiceCIDR that appears, goes or changes its ranges can put
		// a ClusterIP out of range; its status updates cannot.
		Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(r.allServices),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

func (r *Reconciler) allServices(ctx context.Context, _ client.Object) []reconcile.Request {
	var list corev1.ServiceList
	if err := r.client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// Reconcile audits a Service or an IPAddress.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Namespace == "" {
		return r.auditIPAddress(ctx, req.Name)
	}
	return ctrl.Result{}, r.auditService(ctx, req.NamespacedName)
}

func (r *Reconciler) auditService(ctx context.Context, key client.ObjectKey) error {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, key, svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &cidrs); err != nil {
		return err
	}
	_, denied, err := r.tenancy(ctx, svc.Namespace)
	if err != nil {
		return err
	}
	for _, ip := range svc.Spec.ClusterIPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue // None, or invalid (validated by the apiserver)
		}
		family := corev1.IPv4Protocol
		if addr.Is6() {
			family = corev1.IPv6Protocol
		}
		if !containedIn(addr, cidrs.Items, nil) {
			r.events.Warn(ctx, svc, ReasonOutOfRange, actionClusterIP,
				"Cluster IP [%s]: %s is not within any configured Service CIDR; please recreate service", family, ip)
			continue
		}
		if containedIn(addr, cidrs.Items, denied) {
			r.events.Warn(ctx, svc, ReasonExclusive, actionClusterIP,
				"Cluster IP [%s]: %s is in a ServiceCIDR bound exclusively to other namespaces (allocated while svcnet was not answering); please recreate service", family, ip)
		}
		if err := r.auditServiceIP(ctx, svc, ip, family); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reconciler) auditServiceIP(ctx context.Context, svc *corev1.Service, ip string, family corev1.IPFamily) error {
	ipa := &networkingv1.IPAddress{}
	err := r.client.Get(ctx, client.ObjectKey{Name: ip}, ipa)
	if apierrors.IsNotFound(err) {
		// Confirm past the cache: the IPAddress may simply not have arrived yet.
		err = r.apiReader.Get(ctx, client.ObjectKey{Name: ip}, ipa)
	}
	switch {
	case apierrors.IsNotFound(err):
		r.events.Warn(ctx, svc, ReasonNotAllocated, actionClusterIP,
			"Cluster IP [%s]: %s is not allocated; repairing", family, ip)
		created, err := r.createIPAddress(ctx, ip, svc)
		if created {
			repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKind, Object: klog.KRef("", ip), Reason: repairs.ReasonDeleted,
				What: fmt.Sprintf("the IPAddress of ClusterIP %s of Service %s was missing", ip, klog.KObj(svc))})
		}
		return err
	case err != nil:
		return err
	}
	if namesService(ipa, svc) {
		return r.repairLabels(ctx, ipa, family)
	}
	if ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy {
		// Another allocator's, or hand-written: not svcnet's to replace.
		r.events.Warn(ctx, svc, ReasonAlreadyAllocated, actionClusterIP,
			"Cluster IP [%s]:%s is held by IPAddress %s of manager %q for %s; svcnet does not replace IPAddresses of other managers; please recreate service",
			family, ip, ip, ipa.Labels[networkingv1.LabelManagedBy], parentOf(ipa))
		return nil
	}
	return r.auditReference(ctx, svc, ipa, family)
}

// auditReference handles an IPAddress of kube-apiserver's allocator for a
// ClusterIP of svc that names something else, as the apiserver's repair
// loop does: replaced for svc, unless another Service holds the same IP.
func (r *Reconciler) auditReference(ctx context.Context, svc *corev1.Service, ipa *networkingv1.IPAddress, family corev1.IPFamily) error {
	ip := ipa.Name
	ref := ipa.Spec.ParentRef
	if ref != nil && ref.Group == "" && ref.Resource == "services" {
		other := &corev1.Service{}
		err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, other)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err == nil && slices.Contains(other.Spec.ClusterIPs, ip) {
			r.events.Warn(ctx, svc, ReasonAlreadyAllocated, actionClusterIP,
				"Cluster IP [%s]:%s was assigned to multiple services (also %s/%s); please recreate service", family, ip, other.Namespace, other.Name)
			return nil
		}
	}
	r.events.Warn(ctx, svc, ReasonNotAllocated, actionClusterIP,
		"the ClusterIP [%s]: %s for Service %s/%s has a wrong reference; repairing", family, ip, svc.Namespace, svc.Name)
	by := repairs.LastManagerOf(ctx, r.apiReader, ipa)
	if err := r.recreate(ctx, ipa, svc); err != nil {
		return err
	}
	repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKind, Object: klog.KObj(ipa), Reason: repairs.ReasonEdited,
		What: fmt.Sprintf("parentRef %s instead of Service %s", parentOf(ipa), klog.KObj(svc)), By: by})
	return nil
}

// namesService reports whether an IPAddress's parentRef is svc.
func namesService(ipa *networkingv1.IPAddress, svc *corev1.Service) bool {
	ref := ipa.Spec.ParentRef
	return ref != nil && ref.Group == "" && ref.Resource == "services" && ref.Namespace == svc.Namespace && ref.Name == svc.Name
}

// parentOf describes an IPAddress's parentRef.
func parentOf(ipa *networkingv1.IPAddress) string {
	ref := ipa.Spec.ParentRef
	if ref == nil {
		return "no parent"
	}
	return fmt.Sprintf("%s.%s %s/%s", ref.Resource, ref.Group, ref.Namespace, ref.Name)
}

// repairLabels puts back the labels of the allocator's IPAddress of a
// Service's ClusterIP, in place (the parentRef says whose address it is).
// One whose managed-by names another manager is left to it.
func (r *Reconciler) repairLabels(ctx context.Context, ipa *networkingv1.IPAddress, family corev1.IPFamily) error {
	managedBy := ipa.Labels[networkingv1.LabelManagedBy]
	if managedBy != "" && managedBy != ManagedBy {
		return nil
	}
	if managedBy == ManagedBy && ipa.Labels[networkingv1.LabelIPAddressFamily] == string(family) {
		return nil
	}
	by := repairs.LastManagerOf(ctx, r.apiReader, ipa)
	patch := client.MergeFromWithOptions(ipa.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if ipa.Labels == nil {
		ipa.Labels = map[string]string{}
	}
	what := fmt.Sprintf("labels %s=%q %s=%q", networkingv1.LabelManagedBy, managedBy, networkingv1.LabelIPAddressFamily, ipa.Labels[networkingv1.LabelIPAddressFamily])
	ipa.Labels[networkingv1.LabelManagedBy] = ManagedBy
	ipa.Labels[networkingv1.LabelIPAddressFamily] = string(family)
	if err := r.client.Patch(ctx, ipa, patch); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone or changed: the next event decides again
		}
		return fmt.Errorf("repairing the labels of IPAddress %s: %w", ipa.Name, err)
	}
	repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKind, Object: klog.KObj(ipa), Reason: repairs.ReasonEdited, What: what, By: by})
	return nil
}

func newIPAddress(ip string, svc *corev1.Service) *networkingv1.IPAddress {
	family := corev1.IPv4Protocol
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
		family = corev1.IPv6Protocol
	}
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: ip, Labels: map[string]string{
			networkingv1.LabelIPAddressFamily: string(family),
			networkingv1.LabelManagedBy:       ManagedBy,
		}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Resource: "services", Namespace: svc.Namespace, Name: svc.Name,
		}},
	}
}

// createIPAddress creates the IPAddress of ip for svc; created is false
// when one exists already.
func (r *Reconciler) createIPAddress(ctx context.Context, ip string, svc *corev1.Service) (created bool, err error) {
	err = r.client.Create(ctx, newIPAddress(ip, svc))
	if apierrors.IsAlreadyExists(err) {
		return false, nil // kube-apiserver's loop, or the allocation itself, got there first
	}
	if err != nil {
		return false, fmt.Errorf("creating IPAddress %s for Service %s/%s: %w", ip, svc.Namespace, svc.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Created IPAddress", "ipAddress", ip, "service", klog.KObj(svc))
	return true, nil
}

// recreate replaces an IPAddress with one that references svc; only the
// exact object read is deleted.
func (r *Reconciler) recreate(ctx context.Context, ipa *networkingv1.IPAddress, svc *corev1.Service) error {
	if err := r.delete(ctx, ipa); err != nil {
		return err
	}
	_, err := r.createIPAddress(ctx, ipa.Name, svc)
	return err
}

func (r *Reconciler) delete(ctx context.Context, ipa *networkingv1.IPAddress) error {
	err := r.client.Delete(ctx, ipa, client.Preconditions{UID: &ipa.UID, ResourceVersion: &ipa.ResourceVersion})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone or changed: the next event decides again
	}
	if err != nil {
		return fmt.Errorf("deleting IPAddress %s: %w", ipa.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Deleted IPAddress", "ipAddress", ipa.Name)
	return nil
}

func (r *Reconciler) auditIPAddress(ctx context.Context, name string) (ctrl.Result, error) {
	ipa := &networkingv1.IPAddress{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, ipa); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ipa.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	if ours, err := r.allocators(ctx, ipa); err != nil || !ours {
		return ctrl.Result{}, err
	}
	ref := ipa.Spec.ParentRef
	if ref == nil || ref.Group != "" || ref.Resource != "services" {
		r.events.Warn(ctx, ipa, ReasonAddrNotAllocated, actionIPAddress,
			"IPAddress %s appears to have been modified, not referencing a Service %v: cleaning up", ipa.Name, ref)
		return ctrl.Result{}, r.delete(ctx, ipa)
	}
	svc := &corev1.Service{}
	err := r.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, svc)
	if apierrors.IsNotFound(err) {
		if age := r.clock.Since(ipa.CreationTimestamp.Time); age < r.grace {
			return ctrl.Result{RequeueAfter: r.grace - age}, nil
		}
		err = r.apiReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, svc)
		if apierrors.IsNotFound(err) {
			r.events.Warn(ctx, ipa, ReasonAddrNotAllocated, actionIPAddress,
				"IPAddress: %s for Service %s/%s appears to have leaked: cleaning up", ipa.Name, ref.Namespace, ref.Name)
			return ctrl.Result{}, r.delete(ctx, ipa)
		}
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip == ipa.Name {
			return ctrl.Result{}, nil
		}
	}
	// Confirm with a live read: the Service may have just been given the IP.
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	for _, ip := range svc.Spec.ClusterIPs {
		if ip == ipa.Name {
			return ctrl.Result{}, nil
		}
	}
	if age := r.clock.Since(ipa.CreationTimestamp.Time); age < r.grace {
		// A create may be in flight with this IP for a Service of that name.
		return ctrl.Result{RequeueAfter: r.grace - age}, nil
	}
	r.events.Warn(ctx, ipa, ReasonWrongReference, actionIPAddress,
		"IPAddress: %s for Service %s/%s has a wrong reference; cleaning up", ipa.Name, svc.Namespace, svc.Name)
	return ctrl.Result{}, r.delete(ctx, ipa)
}

// allocators reports whether an IPAddress is kube-apiserver's allocator's,
// whose leaks the audit cleans: labelled so, or unlabelled with a Service
// as parent and an address in a ServiceCIDR (its labels removed by hand; the
// audit of the Service puts them back while the Service holds the address).
func (r *Reconciler) allocators(ctx context.Context, ipa *networkingv1.IPAddress) (bool, error) {
	managedBy, labelled := ipa.Labels[networkingv1.LabelManagedBy]
	if labelled && managedBy != "" {
		return managedBy == ManagedBy, nil
	}
	ref := ipa.Spec.ParentRef
	addr, err := netip.ParseAddr(ipa.Name)
	if ref == nil || ref.Group != "" || ref.Resource != "services" || err != nil {
		return false, nil
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &cidrs); err != nil {
		return false, err
	}
	return containedIn(addr, cidrs.Items, nil), nil
}

// checkExhausted emits ServiceCIDRExhausted on every ServiceCIDR that
// contains addr and has no address left.
func (r *Reconciler) checkExhausted(ctx context.Context, name string) {
	addr, err := netip.ParseAddr(name)
	if err != nil {
		return
	}
	stats := r.usage.Stats()
	var cidrs networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &cidrs); err != nil {
		return
	}
	for i := range cidrs.Items {
		sc := &cidrs.Items[i]
		if !containedIn(addr, cidrs.Items[i:i+1], nil) {
			continue
		}
		if st, ok := stats[sc.Name]; ok && st.Size > 0 && st.Size == st.Allocated {
			r.events.Warn(ctx, sc, ReasonExhausted, actionClusterIP,
				"ServiceCIDR %s has no free address left (%d allocated); add a ServiceCIDR to grow the Service ranges", sc.Name, st.Allocated)
		}
	}
}

// containedIn reports whether addr lies in one of the ServiceCIDRs (only
// those named in only, when only is not nil).
func containedIn(addr netip.Addr, cidrs []networkingv1.ServiceCIDR, only []string) bool {
	for i := range cidrs {
		if only != nil && !slices.Contains(only, cidrs[i].Name) {
			continue
		}
		for _, s := range cidrs[i].Spec.CIDRs {
			if p, err := netip.ParsePrefix(s); err == nil && p.Contains(addr) {
				return true
			}
		}
	}
	return false
}

func (r *Reconciler) tenancy(ctx context.Context, namespace string) (bound, denied []string, err error) {
	var bindings svcnetv1alpha1.ServiceCIDRBindingList
	if err := r.client.List(ctx, &bindings); err != nil {
		return nil, nil, err
	}
	if len(bindings.Items) == 0 {
		return nil, []string{}, nil
	}
	var ns corev1.Namespace
	if err := r.client.Get(ctx, client.ObjectKey{Name: namespace}, &ns); client.IgnoreNotFound(err) != nil {
		return nil, nil, err
	}
	bound, denied = feed.Tenancy(bindings.Items, ns.Labels)
	if denied == nil {
		denied = []string{}
	}
	return bound, denied, nil
}
