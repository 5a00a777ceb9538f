// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/controllers/internal/slicetracker"
	"github.com/svcnet-io/svcnet/internal/platform/informersync"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

const (
	// ControllerName is the controller's name in --controllers.
	ControllerName = "endpointslice"
	// ReportingController names this controller in Events.
	ReportingController = "svcnet.io/endpointslice"

	// DefaultMaxEndpointsPerSlice is upstream's default.
	DefaultMaxEndpointsPerSlice = 100
	// MaxMaxEndpointsPerSlice is the largest value the API allows in a slice.
	MaxMaxEndpointsPerSlice = 1000
	// DefaultWorkers is kube-controller-manager's
	// --concurrent-service-endpoint-syncs.
	DefaultWorkers = 5

	// staleCacheRetry is how soon a sync that found its own writes missing
	// from the cache tries again (the slice events usually come first).
	staleCacheRetry = 100 * time.Millisecond
)

// Options configures the controller.
type Options struct {
	// MaxEndpointsPerSlice caps the endpoints of one slice (1..1000).
	MaxEndpointsPerSlice int
	// BatchPeriod delays a sync after a Pod change so that changes arriving
	// together are written together; 0 syncs at once, as upstream's default.
	BatchPeriod time.Duration
	// Workers is the number of Services synced in parallel.
	Workers int
}

// Validate reports every option out of range, each as an *OptionError
// (joined with errors.Join when there are several).
func (o Options) Validate() error {
	var errs []error
	if o.MaxEndpointsPerSlice < 1 || o.MaxEndpointsPerSlice > MaxMaxEndpointsPerSlice {
		errs = append(errs, &OptionError{Field: "MaxEndpointsPerSlice", Flag: "--max-endpoints-per-slice",
			Problem: fmt.Sprintf("must be between 1 and %d, got %d", MaxMaxEndpointsPerSlice, o.MaxEndpointsPerSlice)})
	}
	if o.BatchPeriod < 0 {
		errs = append(errs, &OptionError{Field: "BatchPeriod", Flag: "--endpointslice-updates-batch-period",
			Problem: fmt.Sprintf("must not be negative, got %s", o.BatchPeriod)})
	}
	if o.Workers < 1 {
		errs = append(errs, &OptionError{Field: "Workers", Flag: "--concurrent-service-endpoint-syncs",
			Problem: fmt.Sprintf("must be at least 1, got %d", o.Workers)})
	}
	return errors.Join(errs...)
}

// OptionError is an option out of range: it names the Go field and the
// `svcnet manager` flag that sets it.
type OptionError struct {
	// Field is the Go field, relative to Options.
	Field string
	// Flag is the command-line flag.
	Flag string
	// Problem says what is wrong with the value.
	Problem string
}

func (e *OptionError) Error() string { return e.Field + " (" + e.Flag + ") " + e.Problem }

// DefaultOptions are upstream's defaults.
func DefaultOptions() Options {
	return Options{MaxEndpointsPerSlice: DefaultMaxEndpointsPerSlice, Workers: DefaultWorkers}
}

// +kubebuilder:rbac:groups="",resources=services;pods;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler keeps the EndpointSlices of one Service per request.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	opts      Options
	clock     clock.PassiveClock

	slices    *slicetracker.Tracker
	changes   *changeTracker
	triggers  *triggerTimeTracker
	selectors *selectorIndex
	nodes     *nodeInfoMap
	hints     *hintTracker
	recorder  events.EventRecorder
	stats     *statsCache
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// Option customises a Reconciler.
type Option func(*Reconciler)

// WithClock replaces the wall clock (tests).
func WithClock(c clock.PassiveClock) Option { return func(r *Reconciler) { r.clock = c } }

// WithEventRecorder records the topology-aware routing Events
// (TopologyAwareHintsEnabled / TopologyAwareHintsDisabled) through rec;
// without it there are none.
func WithEventRecorder(rec events.EventRecorder) Option {
	return func(r *Reconciler) { r.recorder = rec }
}

// New returns a Reconciler that reads from c's cache, confirms deletions
// with apiReader and writes through c.
func New(c client.Client, apiReader client.Reader, opts Options, options ...Option) *Reconciler {
	r := &Reconciler{
		client:    c,
		apiReader: apiReader,
		opts:      opts,
		clock:     clock.RealClock{},
		slices:    slicetracker.New(Owns),
		changes:   newChangeTracker(),
		triggers:  newTriggerTimeTracker(),
		selectors: newSelectorIndex(),
		nodes:     &nodeInfoMap{m: map[string]nodeInfo{}},
		hints:     newHintTracker(),
		stats:     newStatsCache(),
	}
	for _, o := range options {
		o(r)
	}
	return r
}

// SetupWithManager registers the controller and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := r.opts.Validate(); err != nil {
		return err
	}
	registerMetrics()
	repairs.Register()
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podLabelIndex, podLabelPairs); err != nil {
		return fmt.Errorf("indexing Pods by label: %w", err)
	}
	// The four informers list in parallel while the manager starts its
	// caches, and the sources report synced the moment their handlers have
	// seen every listed object (see internal/platform/informersync), not at
	// the next tick of a poll (BENCHMARKS.md (a) and (b) measure start-up).
	c := mgr.GetCache()
	if err := informersync.Prestart(context.Background(), c,
		&corev1.Service{}, &corev1.Pod{}, &discoveryv1.EndpointSlice{}, &corev1.Node{}); err != nil {
		return err
	}
	log := mgr.GetLogger().WithValues("controller", ControllerName, "controllerGroup", "", "controllerKind", "Service")
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WatchesRawSource(informersync.NewKind[client.Object](c, &corev1.Service{}, &handler.EnqueueRequestForObject{}, servicePredicate(r))).
		WatchesRawSource(informersync.NewKind[client.Object](c, &corev1.Pod{}, &podHandler{r: r})).
		WatchesRawSource(informersync.NewKind[client.Object](c, &discoveryv1.EndpointSlice{}, r.slices.Handler())).
		WatchesRawSource(informersync.NewKind[client.Object](c, &corev1.Node{}, &nodeHandler{r: r})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.opts.Workers,
			LogConstructor: func(req *reconcile.Request) logr.Logger {
				if req == nil {
					return log
				}
				return log.WithValues("Service", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
			},
		}).
		Complete(r)
}

// Reconcile brings the slices of one Service to the desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, err error) {
	key := req.NamespacedName
	observed, hadChange := r.changes.take(key)
	defer func() { r.finishSync(key, observed, hadChange, result, err) }()

	svc := &corev1.Service{}
	if err := r.client.Get(ctx, key, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.serviceGone(ctx, key)
	}
	if svc.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // the garbage collector removes the slices
	}
	ours, err := r.existingSlices(ctx, key)
	if err != nil {
		r.recordFailure(svc, ReasonFailedToListEndpointSlices, "listing Endpoint Slices", err)
		return ctrl.Result{}, err
	}
	if stale, err := r.slices.StaleConfirmed(ctx, r.apiReader, key, ours); err != nil {
		return ctrl.Result{}, err
	} else if stale {
		ctrl.LoggerFrom(ctx).V(4).Info("EndpointSlice cache is behind this controller's writes, retrying", "service", klog.KObj(svc))
		return ctrl.Result{RequeueAfter: staleCacheRetry}, nil
	}

	if svc.Spec.Type == corev1.ServiceTypeExternalName || len(svc.Spec.Selector) == 0 {
		// Not ours to publish: ExternalName Services have no endpoints, and
		// Services without a selector get slices from their owner.
		if _, err := r.apply(ctx, svc, []plan{{delete: ours}}, time.Time{}, time.Time{}, false); err != nil {
			r.recordFailure(svc, ReasonFailedToUpdateEndpointSlices, "updating Endpoint Slices", err)
			return ctrl.Result{}, err
		}
		r.slices.Repaired(key)
		r.hints.forget(key)
		r.stats.forget(key)
		return ctrl.Result{}, nil
	}
	r.slices.Attribute(ctx, r.apiReader, key)
	sp, err := r.planSlices(ctx, svc, ours)
	if err != nil {
		return ctrl.Result{}, err
	}
	// As upstream, the per-sync endpoint counts and the gauges are taken
	// from the plan, before and whatever the writes.
	for _, p := range sp.families {
		metricEndpointsAdded.Observe(float64(p.added))
		metricEndpointsRemoved.Observe(float64(p.removed))
	}
	r.stats.set(key, sp.stats)
	wrote, err := r.apply(ctx, svc, append(slices.Clone(sp.families), sp.dropped), sp.trigger, observed, hadChange)
	// As upstream, the hint Events are recorded whether or not the writes
	// went through.
	r.recordHintEvents(svc, sp.hintEvents)
	if err != nil {
		r.recordFailure(svc, ReasonFailedToUpdateEndpointSlices, "updating Endpoint Slices", err)
		return ctrl.Result{}, err
	}
	observeSlicesChanged(svc, sp.families)
	if repaired := r.slices.Repaired(key); wrote {
		for _, c := range repaired {
			repairs.Report(ctrl.LoggerFrom(ctx), c)
		}
	}
	return ctrl.Result{}, nil
}

// observeSlicesChanged counts the slices a successful sync wrote, per
// address family, labelled as upstream: topology "Auto" when the
// topology-mode annotation decides the hints, else "Disabled", and the
// trafficDistribution that decides them, if any.
func observeSlicesChanged(svc *corev1.Service, families []plan) {
	topology := "Disabled"
	if hintModeOf(svc) == hintsAuto {
		topology = "Auto"
	}
	td := trafficDistributionOf(svc)
	for _, p := range families {
		metricSlicesChanged.WithLabelValues(topology, td).Observe(float64(len(p.create) + len(p.update) + len(p.delete)))
	}
}

// trafficDistributionOf is the spec.trafficDistribution that decides the
// Service's hints, "" when there is none or the topology-mode annotation
// overrides it.
func trafficDistributionOf(svc *corev1.Service) string {
	if hintModeOf(svc) != hintsClose {
		return ""
	}
	return *svc.Spec.TrafficDistribution
}

// kube-controller-manager's Warning Events of a sync that failed, on the
// Service.
const (
	ReasonFailedToListPods             = "FailedToListPods"
	ReasonFailedToListEndpointSlices   = "FailedToListEndpointSlices"
	ReasonFailedToUpdateEndpointSlices = "FailedToUpdateEndpointSlices"
)

// recordFailure records a failed sync step on the Service as
// kube-controller-manager words it ("Error updating Endpoint Slices for
// Service ns/name: ..."); the sync is retried with backoff.
func (r *Reconciler) recordFailure(svc *corev1.Service, reason, doing string, err error) {
	if r.recorder == nil {
		return
	}
	r.recorder.Eventf(svc, nil, corev1.EventTypeWarning, reason, "Sync", "Error %s for Service %s/%s: %v", doing, svc.Namespace, svc.Name, err)
}

func (r *Reconciler) recordHintEvents(svc *corev1.Service, evs []hintEvent) {
	if r.recorder == nil {
		return
	}
	for _, ev := range evs {
		r.recorder.Eventf(svc, nil, ev.eventType, ev.reason, "TopologyHints", "%s", ev.message)
	}
}

// Owns reports whether the labels of a slice make it this controller's.
func Owns(s *discoveryv1.EndpointSlice) bool {
	switch s.Labels[discoveryv1.LabelManagedBy] {
	case ManagedBy, LegacyManagedBy:
		return true
	}
	return false
}

// finishSync counts a sync's outcome and, when it did not apply, gives
// its change trigger back for the next one.
func (r *Reconciler) finishSync(key types.NamespacedName, observed time.Time, hadChange bool, result ctrl.Result, err error) {
	switch {
	case err != nil:
		metricSyncs.WithLabelValues("error").Inc()
	case result.RequeueAfter > 0:
		metricSyncs.WithLabelValues("stale").Inc()
	default:
		metricSyncs.WithLabelValues("success").Inc()
		return
	}
	if hadChange {
		r.changes.restore(key, observed)
	}
}

// existingSlices lists the Service's slices that this controller owns:
// those it wrote, and those kube-controller-manager's controller (the same
// managed-by) or an older svcnet wrote, which it adopts.
func (r *Reconciler) existingSlices(ctx context.Context, key types.NamespacedName) ([]*discoveryv1.EndpointSlice, error) {
	var sliceList discoveryv1.EndpointSliceList
	if err := r.client.List(ctx, &sliceList, client.InNamespace(key.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing EndpointSlices of %s: %w", key, err)
	}
	var ours []*discoveryv1.EndpointSlice
	for i := range sliceList.Items {
		if s := &sliceList.Items[i]; Owns(s) {
			ours = append(ours, s)
		}
	}
	return ours, nil
}

// slicePlan is what planSlices decides for one Service.
type slicePlan struct {
	// families holds one plan per address family of the Service, dropped
	// the deletion of the slices of families it no longer has.
	families []plan
	dropped  plan
	// stats is what the Service will have, for the gauges.
	stats serviceStats
	// trigger is the endpoints.kubernetes.io/last-change-trigger-time of
	// the slices this sync writes; zero removes it.
	trigger time.Time
	// hintEvents are the topology-aware routing Events to record.
	hintEvents []hintEvent
}

// planSlices computes the plan of every address family from the selected
// Pods, plus the deletion of slices of dropped families.
func (r *Reconciler) planSlices(ctx context.Context, svc *corev1.Service, ours []*discoveryv1.EndpointSlice) (slicePlan, error) {
	key := client.ObjectKeyFromObject(svc)
	pods, err := r.selectedPods(ctx, svc)
	if err != nil {
		r.recordFailure(svc, ReasonFailedToListPods, "listing Pods", err)
		return slicePlan{}, fmt.Errorf("listing Pods of %s: %w", key, err)
	}
	auto := hintModeOf(svc) == hintsAuto
	nodes, err := r.nodeInfos(ctx, pods, auto)
	if err != nil {
		return slicePlan{}, err
	}
	var ratios map[string]float64
	if auto {
		ratios = zoneRatios(nodes)
	}
	sp := slicePlan{trigger: r.triggers.compute(key, svc, pods)}
	sp.stats.trafficDistribution = trafficDistributionOf(svc)
	families := ipfamily.OfService(svc)
	for _, family := range families {
		addressType := discoveryv1.AddressType(family)
		desired := computeDesiredEndpoints(svc, pods, nodes, family)
		sp.hintEvents = append(sp.hintEvents, r.hints.observe(key, addressType, applyHints(svc, desired, ratios))...)
		var existing []*discoveryv1.EndpointSlice
		for _, s := range ours {
			if s.AddressType == addressType {
				existing = append(existing, s)
			}
		}
		p := computeDesiredSlices(newSliceMeta(svc, addressType), desired, existing, r.opts.MaxEndpointsPerSlice)
		sp.families = append(sp.families, p)
		sp.stats.endpoints += desired.count()
		sp.stats.slices += len(existing) + len(p.create) - len(p.delete)
		sp.stats.desiredSlices += desiredSlicesOf(desired, r.opts.MaxEndpointsPerSlice)
	}
	for _, s := range ours {
		if !slices.Contains(families, corev1.IPFamily(s.AddressType)) {
			sp.dropped.delete = append(sp.dropped.delete, s)
		}
	}
	return sp, nil
}

// desiredSlicesOf is the number of slices one family's endpoints would
// take with perfect packing: ceil(endpoints/max) per port set, and the
// placeholder when there are none.
func desiredSlicesOf(desired desiredEndpoints, maxPerSlice int) int {
	n := 0
	for _, g := range desired {
		n += desiredSliceCount(len(g.endpoints), maxPerSlice)
	}
	return max(n, 1)
}

// podLabelIndex indexes Pods by each of their "key=value" label pairs, so
// that a sync reads only the Pods that carry one pair of the selector
// instead of every Pod of the namespace.
const podLabelIndex = "svcnet.io/pod-label"

func podLabelPairs(obj client.Object) []string {
	out := make([]string, 0, len(obj.GetLabels()))
	for k, v := range obj.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out
}

// selectedPods returns the Pods a Service's selector matches.
func (r *Reconciler) selectedPods(ctx context.Context, svc *corev1.Service) ([]*corev1.Pod, error) {
	// Any pair of the selector narrows the candidates; take the smallest key
	// so the choice is stable.
	keys := slices.Sorted(maps.Keys(svc.Spec.Selector))
	var list corev1.PodList
	if err := r.client.List(ctx, &list, client.InNamespace(svc.Namespace),
		client.MatchingFields{podLabelIndex: keys[0] + "=" + svc.Spec.Selector[keys[0]]}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if selectorMatches(svc.Spec.Selector, list.Items[i].Labels) {
			pods = append(pods, &list.Items[i])
		}
	}
	return pods, nil
}

// selectorMatches is a Service selector match without allocating.
func selectorMatches(selector, podLabels map[string]string) bool {
	for k, v := range selector {
		if got, ok := podLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// serviceGone deletes this controller's slices of a Service that no longer
// exists. The garbage collector would, through the ownerReference; doing it
// here also keeps clusters without one (envtest) clean. The cache's
// NotFound is confirmed against the API server first.
func (r *Reconciler) serviceGone(ctx context.Context, key types.NamespacedName) error {
	if err := r.apiReader.Get(ctx, key, &corev1.Service{}); err == nil {
		return nil // the cache is behind; the Service's own event syncs it
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	ours, err := r.existingSlices(ctx, key)
	if err != nil {
		return err
	}
	for _, s := range ours {
		if err := r.client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting EndpointSlice %s of deleted Service: %w", klog.KObj(s), err)
		}
	}
	r.slices.Forget(key)
	r.hints.forget(key)
	r.triggers.forget(key)
	r.stats.forget(key)
	return nil
}

// apply writes plans: every create and update first, then the deletes, so
// that an endpoint moving between slices is never missing from all of them.
// Every slice it creates or updates carries trigger as its
// last-change-trigger-time, or none when trigger is zero. It reports
// whether it wrote anything.
func (r *Reconciler) apply(ctx context.Context, svc *corev1.Service, plans []plan, trigger, observed time.Time, hadChange bool) (bool, error) {
	key := client.ObjectKeyFromObject(svc)
	writes, deletes := collectWrites(plans)
	// Creates and updates first, so that endpoints moving between slices
	// are published in their new place before any slice holding them goes.
	// Within each phase the writes are independent, and many go out in
	// parallel: a Service of 5,000 endpoints is 50 slices, and one write at
	// a time would wait 50 round trips.
	var wrote atomic.Bool
	errs := inParallel(writes, func(w sliceWrite) error {
		if err := r.writeSlice(ctx, key, w, trigger); err != nil {
			return err
		}
		wrote.Store(true)
		return nil
	})
	if len(errs) > 0 {
		// Deleting now could remove endpoints that a failed write was
		// supposed to carry elsewhere.
		return wrote.Load(), errors.Join(errs...)
	}
	errs = inParallel(deletes, func(s *discoveryv1.EndpointSlice) error {
		if err := r.deleteSlice(ctx, key, s); err != nil {
			return err
		}
		wrote.Store(true)
		return nil
	})
	if wrote.Load() && hadChange {
		metricChangeToWrite.Observe(r.clock.Since(observed).Seconds())
	}
	return wrote.Load(), errors.Join(errs...)
}

// sliceWrite is a create or an update of one slice.
type sliceWrite struct {
	slice  *discoveryv1.EndpointSlice
	create bool
}

// collectWrites gathers the plans' writes and deletes.
func collectWrites(plans []plan) (writes []sliceWrite, deletes []*discoveryv1.EndpointSlice) {
	for _, p := range plans {
		for _, s := range p.create {
			writes = append(writes, sliceWrite{slice: s, create: true})
		}
		for _, s := range p.update {
			writes = append(writes, sliceWrite{slice: s})
		}
		deletes = append(deletes, p.delete...)
	}
	return writes, deletes
}

// writeSlice creates or updates one slice, stamped with the sync's trigger
// time, and records it against this controller's stale cache.
func (r *Reconciler) writeSlice(ctx context.Context, key types.NamespacedName, w sliceWrite, trigger time.Time) error {
	s := w.slice
	setTriggerTime(s, trigger)
	verb, msg := "update", "Updated EndpointSlice"
	if w.create {
		verb, msg = "create", "Created EndpointSlice"
		if err := r.client.Create(ctx, s); err != nil {
			return fmt.Errorf("creating EndpointSlice for %s: %w", key, err)
		}
	} else {
		r.slices.Expect(s)
		if err := r.client.Update(ctx, s); err != nil {
			r.slices.Abort(s)
			return fmt.Errorf("updating EndpointSlice %s: %w", klog.KObj(s), err)
		}
	}
	r.slices.Record(key, s)
	metricChanges.WithLabelValues(verb).Inc()
	ctrl.LoggerFrom(ctx).V(2).Info(msg, "endpointSlice", klog.KObj(s), "endpoints", len(s.Endpoints))
	return nil
}

// deleteSlice deletes one slice, if it is still the one planned on.
func (r *Reconciler) deleteSlice(ctx context.Context, key types.NamespacedName, s *discoveryv1.EndpointSlice) error {
	r.slices.Expect(s)
	err := r.client.Delete(ctx, s, client.Preconditions{UID: &s.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		r.slices.Abort(s)
		return fmt.Errorf("deleting EndpointSlice %s: %w", klog.KObj(s), err)
	}
	r.slices.RecordDeleted(key, s)
	metricChanges.WithLabelValues("delete").Inc()
	ctrl.LoggerFrom(ctx).V(2).Info("Deleted EndpointSlice", "endpointSlice", klog.KObj(s), "managedBy", s.Labels[discoveryv1.LabelManagedBy])
	return nil
}

// A sync with more than sequentialWrites writes (a large Service's first
// sync, a big scale-up) sends them in parallel, at most maxParallelWrites
// in flight; the client's rate limiter still paces them. Smaller syncs write
// one at a time: while they do, the next changes gather for the next sync,
// which saves writes during rolling updates (BENCHMARKS.md (c)).
const (
	sequentialWrites  = 4
	maxParallelWrites = 8
)

// inParallel calls f for every item, in parallel when there are more than
// sequentialWrites, and returns the errors in item order.
func inParallel[T any](items []T, f func(T) error) []error {
	if len(items) <= sequentialWrites {
		var errs []error
		for _, it := range items {
			if err := f(it); err != nil {
				errs = append(errs, err)
			}
		}
		return errs
	}
	results := make([]error, len(items))
	sem := make(chan struct{}, maxParallelWrites)
	var wg sync.WaitGroup
	for i, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = f(it)
		})
	}
	wg.Wait()
	var errs []error
	for _, err := range results {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// nodeInfos returns what the controller needs of the Nodes of pods, from
// the map the Node handler keeps; topology-mode Auto needs every Node.
// Reading the map avoids copying Node objects out of the cache on every
// sync, which grows with the cluster.
func (r *Reconciler) nodeInfos(ctx context.Context, pods []*corev1.Pod, all bool) (map[string]nodeInfo, error) {
	if all {
		var list corev1.NodeList
		if err := r.client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing Nodes: %w", err)
		}
		out := make(map[string]nodeInfo, len(list.Items))
		for i := range list.Items {
			out[list.Items[i].Name] = nodeInfoOf(&list.Items[i])
		}
		return out, nil
	}
	out := map[string]nodeInfo{}
	for _, pod := range pods {
		name := pod.Spec.NodeName
		if name == "" {
			continue
		}
		if _, done := out[name]; done {
			continue
		}
		info, ok := r.nodes.get(name)
		if !ok {
			// The handler has not seen this Node (yet): read it once.
			var n corev1.Node
			if err := r.client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("reading Node %s: %w", name, err)
			}
			info = nodeInfoOf(&n)
			r.nodes.set(name, info)
		}
		out[name] = info
	}
	return out, nil
}

// nodeInfoMap holds nodeInfo by Node name, kept by the Node handler.
type nodeInfoMap struct {
	mu sync.RWMutex
	m  map[string]nodeInfo
}

func (n *nodeInfoMap) get(name string) (nodeInfo, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	info, ok := n.m[name]
	return info, ok
}

func (n *nodeInfoMap) set(name string, info nodeInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m[name] = info
}

func (n *nodeInfoMap) remove(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.m, name)
}

func nodeInfoOf(n *corev1.Node) nodeInfo {
	info := nodeInfo{zone: n.Labels[LabelZone]}
	_, controlPlane := n.Labels[labelControlPlane]
	_, master := n.Labels[labelMaster]
	info.excluded = controlPlane || master
	if q, ok := n.Status.Allocatable[corev1.ResourceCPU]; ok {
		info.cpu = q.MilliValue()
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			info.ready = c.Status == corev1.ConditionTrue
		}
	}
	return info
}

// setTriggerTime sets the last-change-trigger-time annotation of a slice
// about to be written, or removes it when the sync had no trigger, as
// upstream's addTriggerTimeAnnotation does.
func setTriggerTime(s *discoveryv1.EndpointSlice, trigger time.Time) {
	if trigger.IsZero() {
		delete(s.Annotations, corev1.EndpointsLastChangeTriggerTime)
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = trigger.UTC().Format(time.RFC3339Nano)
}
