// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslicemirroring

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/controllers/internal/slicetracker"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

const (
	// ControllerName is the name `--controllers` knows it by.
	ControllerName = "endpointslicemirroring"
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
	// slices this controller writes: kube-controller-manager's mirroring
	// controller's, whose slices it adopts in place.
	ManagedBy = "endpointslicemirroring-controller.k8s.io"
	// LegacyManagedBy is the value earlier svcnet releases wrote; their
	// slices are adopted and relabelled ManagedBy at their next sync.
	LegacyManagedBy = "endpointslicemirroring-controller.svcnet.io"

	// ReportingController names this controller in Events.
	ReportingController = "svcnet.io/endpointslicemirroring"

	// ReasonInvalidIPAddress (kube-controller-manager's) reports addresses
	// that are not IPs.
	ReasonInvalidIPAddress = "InvalidIPAddress"
	// ReasonTooManyAddressesToMirror (kube-controller-manager's) reports
	// addresses over the per-subset limit.
	ReasonTooManyAddressesToMirror = "TooManyAddressesToMirror"

	// staleCacheRetry is how soon a sync whose cache misses this
	// controller's own writes is retried.
	staleCacheRetry = 100 * time.Millisecond

	// DefaultMaxEndpointsPerSubset is kube-controller-manager's
	// --mirroring-max-endpoints-per-subset.
	DefaultMaxEndpointsPerSubset = 1000
	// MaxMaxEndpointsPerSubset is kube-controller-manager's upper bound
	// for --mirroring-max-endpoints-per-subset.
	MaxMaxEndpointsPerSubset = 1000
	// DefaultWorkers is kube-controller-manager's
	// --mirroring-concurrent-service-endpoint-syncs.
	DefaultWorkers = 5
)

// Options configure the controller.
type Options struct {
	// MaxEndpointsPerSubset is the most addresses mirrored from one subset
	// (--mirroring-max-endpoints-per-subset); 0 means
	// DefaultMaxEndpointsPerSubset.
	MaxEndpointsPerSubset int
	// Workers is the number of Endpoints synced in parallel
	// (--mirroring-concurrent-service-endpoint-syncs); 0 means
	// DefaultWorkers.
	Workers int
	// BatchPeriod delays the sync that a change to a mirrored
	// EndpointSlice causes, so that changes arriving together are handled
	// together (--mirroring-endpointslice-updates-batch-period); 0, the
	// default, syncs at once. Changes to Endpoints and Services are
	// synced at once, as upstream.
	BatchPeriod time.Duration
}

// DefaultOptions are kube-controller-manager's defaults.
func DefaultOptions() Options {
	return Options{MaxEndpointsPerSubset: DefaultMaxEndpointsPerSubset, Workers: DefaultWorkers}
}

// Reconciler mirrors one Endpoints object (by namespace/name, the Service's)
// per request.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	opts      Options
	slices    *slicetracker.Tracker
	stats     *statsCache
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// New returns a Reconciler that reads from c's cache, confirms with
// apiReader that a slice it wrote is gone, and writes through c.
func New(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts Options) *Reconciler {
	d := DefaultOptions()
	if opts.MaxEndpointsPerSubset <= 0 {
		opts.MaxEndpointsPerSubset = d.MaxEndpointsPerSubset
	}
	if opts.Workers <= 0 {
		opts.Workers = d.Workers
	}
	return &Reconciler{client: c, apiReader: apiReader, recorder: recorder, opts: opts, slices: slicetracker.New(Owns), stats: newStatsCache()}
}

// +kubebuilder:rbac:groups="",resources=endpoints;services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager watches Endpoints, their Services, and the slices this
// controller owns.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	repairs.Register()
	registerMetrics()
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&corev1.Endpoints{}).
		Watches(&corev1.Service{}, &handler.EnqueueRequestForObject{}).
		Watches(&discoveryv1.EndpointSlice{}, batched(r.slices.Handler(), r.opts.BatchPeriod)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.Workers}).
		Complete(r)
}

// Owns reports whether the labels of a slice make it this controller's.
func Owns(s *discoveryv1.EndpointSlice) bool {
	switch s.Labels[discoveryv1.LabelManagedBy] {
	case ManagedBy, LegacyManagedBy:
		return true
	}
	return false
}

// Reconcile brings the mirrored slices of one Endpoints object to what it
// says, or removes them when it is not to be mirrored.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Upstream observes every sync, in whole milliseconds.
	start := time.Now()
	defer func() { metricSyncDuration.Observe(float64(time.Since(start).Milliseconds()) / 1000) }()
	key := req.NamespacedName
	ours, err := r.existingSlices(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	if stale, err := r.slices.StaleConfirmed(ctx, r.apiReader, key, ours); err != nil {
		return ctrl.Result{}, err
	} else if stale {
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	}
	ep, err := r.toMirror(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ep == nil {
		r.stats.forget(key)
		// As upstream, removing the slices of Endpoints that are not
		// mirrored (any more) is not counted in the changes.
		err := r.apply(ctx, key, plan{delete: ours}, false)
		r.slices.Repaired(key)
		if err == nil && len(ours) == 0 {
			r.slices.Forget(key)
		}
		return ctrl.Result{}, err
	}
	m := computeDesiredMirror(ep, r.opts.MaxEndpointsPerSubset)
	metricAddressesSkipped.Observe(float64(m.skipped))
	// Like kube-controller-manager's mirroring controller, truncation is
	// said in an Event only: the Endpoints are the user's (or their GitOps
	// tool's) and this controller never writes to them.
	r.report(ep, m)
	r.slices.Attribute(ctx, r.apiReader, key)
	p := planMirror(newSliceMeta(ep), m, ours)
	t := mirrorTotals(m, ours)
	metricEndpointsAdded.Observe(float64(t.added))
	metricEndpointsUpdated.Observe(float64(t.updated))
	metricEndpointsRemoved.Observe(float64(t.removed))
	r.stats.set(key, statsOf(m))
	if err := r.apply(ctx, key, p, true); err != nil {
		return ctrl.Result{}, err
	}
	repaired := r.slices.Repaired(key)
	if len(p.create)+len(p.update)+len(p.delete) > 0 {
		for _, c := range repaired {
			repairs.Report(ctrl.LoggerFrom(ctx), c)
		}
	}
	return ctrl.Result{}, nil
}

// toMirror returns the Endpoints of key when they are to be mirrored: the
// Service exists without a selector, and neither the skip-mirror label nor
// a leader-election record marks the Endpoints.
func (r *Reconciler) toMirror(ctx context.Context, key types.NamespacedName) (*corev1.Endpoints, error) {
	var svc corev1.Service
	if err := r.client.Get(ctx, key, &svc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if svc.Spec.Selector != nil {
		return nil, nil
	}
	ep := &corev1.Endpoints{}
	if err := r.client.Get(ctx, key, ep); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if ep.DeletionTimestamp != nil || ep.Labels[discoveryv1.LabelSkipMirror] == "true" {
		return nil, nil
	}
	if _, ok := ep.Annotations[resourcelock.LeaderElectionRecordAnnotationKey]; ok {
		return nil, nil
	}
	return ep, nil
}

// existingSlices lists the Service's mirrored slices that this controller
// owns: those it wrote, and those kube-controller-manager's mirroring
// controller (the same managed-by) or an older svcnet wrote, which it
// adopts.
func (r *Reconciler) existingSlices(ctx context.Context, key types.NamespacedName) ([]*discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := r.client.List(ctx, &list, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
		return nil, fmt.Errorf("listing EndpointSlices of %s: %w", key, err)
	}
	var ours []*discoveryv1.EndpointSlice
	for i := range list.Items {
		if Owns(&list.Items[i]) {
			ours = append(ours, &list.Items[i])
		}
	}
	return ours, nil
}

// report records Warning Events for the addresses that were not mirrored.
func (r *Reconciler) report(ep *corev1.Endpoints, m mirror) {
	if m.invalid > 0 {
		r.recorder.Eventf(ep, nil, corev1.EventTypeWarning, ReasonInvalidIPAddress, "Mirror",
			"Skipped %d invalid IP addresses when mirroring to EndpointSlices", m.invalid)
	}
	if m.skipped > m.invalid {
		r.recorder.Eventf(ep, nil, corev1.EventTypeWarning, ReasonTooManyAddressesToMirror, "Mirror",
			"A max of %d addresses can be mirrored to EndpointSlices per Endpoints subset. %d addresses were skipped", r.opts.MaxEndpointsPerSubset, m.skipped-m.invalid)
	}
}

// apply writes the plan: creates and updates first, then deletes, so that
// an address is never missing from every slice. countChanges counts the
// writes in endpoint_slice_mirroring_controller_changes.
func (r *Reconciler) apply(ctx context.Context, key types.NamespacedName, p plan, countChanges bool) error {
	log := ctrl.LoggerFrom(ctx)
	count := func(operation string) {
		if countChanges {
			metricChanges.WithLabelValues(operation).Inc()
		}
	}
	for _, s := range p.create {
		if err := r.client.Create(ctx, s); err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil
			}
			return fmt.Errorf("creating EndpointSlice for Endpoints %s: %w", key, err)
		}
		r.slices.Record(key, s)
		count("create")
		log.V(2).Info("Created EndpointSlice", "endpointSlice", klog.KObj(s), "endpoints", len(s.Endpoints))
	}
	for _, s := range p.update {
		r.slices.Expect(s)
		if err := r.client.Update(ctx, s); err != nil {
			r.slices.Abort(s)
			return fmt.Errorf("updating EndpointSlice %s: %w", klog.KObj(s), err)
		}
		r.slices.Record(key, s)
		count("update")
		log.V(2).Info("Updated EndpointSlice", "endpointSlice", klog.KObj(s), "endpoints", len(s.Endpoints))
	}
	var errs []error
	for _, s := range p.delete {
		r.slices.Expect(s)
		err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.slices.Abort(s)
			errs = append(errs, fmt.Errorf("deleting EndpointSlice %s: %w", klog.KObj(s), err))
			continue
		}
		r.slices.RecordDeleted(key, s)
		count("delete")
		log.V(2).Info("Deleted EndpointSlice", "endpointSlice", klog.KObj(s), "managedBy", s.Labels[discoveryv1.LabelManagedBy])
	}
	return errors.Join(errs...)
}
