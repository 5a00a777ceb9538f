// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/informersync"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

// Backoff bounds for retrying a failed sync.
const (
	// fullSyncPeriod is how often a periodic resync rewrites every chain
	// (kube-proxy's FullSyncPeriod).
	fullSyncPeriod = time.Hour
	retryMin       = 100 * time.Millisecond
	retryMax       = 10 * time.Second
	// recheckChunk is how many Services one step of a periodic recheck
	// compares with the cache: a change waits behind one step at most,
	// never behind a whole pass (docs/BENCHMARKS.md (n)).
	recheckChunk = 500
)

// ready is a channel that is always ready to receive from.
var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Agent is one node's proxy.
type Agent struct {
	cfg    Config
	reader client.Reader
	log    logr.Logger
	clock  clock.WithTicker

	// backends program the rules, one per IP family the node has.
	backends []dataplane.Backend
	health   *healthServers

	trigger chan struct{}
	// views are the API's questions to the sync loop (view.go).
	views chan viewQuery

	mu          sync.Mutex
	lastSuccess time.Time
	lastFull    time.Time
	// failure is why the last sync failed; nil once one succeeds.
	failure *syncFailure
	// queuedAt is when the oldest change not yet taken by a sync was
	// queued, syncingQueuedAt that of the changes the running sync took,
	// in each IP family the change is of (a slice's address type, a
	// Service's ClusterIP families), as kube-proxy's proxier of each
	// family queues only its own; a family with none is absent. Health is
	// judged by the older.
	queuedAt, syncingQueuedAt familyTimes
	// familyUpdated is when each IP family's backend last applied a sync
	// (at start, the agent's start, as kube-proxy marks each proxier
	// updated when its loop starts); familyBehind is when the oldest
	// change a family's backend refused was queued, zero once it applies
	// one. A family whose backend refused a sync that the other family's
	// applied is alone behind, as one of kube-proxy's two proxiers.
	familyUpdated map[corev1.IPFamily]time.Time
	familyBehind  familyTimes
	// triggers are the last-change-trigger-times of slices changed since
	// the last successful sync, for the network programming latency.
	triggers []changeTrigger
	// serviceChanges and endpointChanges are the Services and the count of
	// EndpointSlice changes queued since the last sync took its work, for
	// kube-proxy's *_changes_pending metrics.
	serviceChanges  map[types.NamespacedName]bool
	endpointChanges int
	// startedAt is when the agent was built: trigger times before it are
	// not the agent's to measure, as kube-proxy's tracker ignores them.
	startedAt time.Time
	// dirty holds the Services whose objects changed since they were last
	// rendered; allDirty re-renders every Service.
	dirty    map[types.NamespacedName]bool
	allDirty bool
	// recheckPasses counts the periodic rechecks that went through every
	// rendered Service.
	recheckPasses int

	// Owned by the sync loop.
	services map[types.NamespacedName]*serviceState
	order    []types.NamespacedName // keys of services, sorted
	// noLocal sums the Services' noLocal, by family.
	noLocal map[corev1.IPFamily]noLocalCounts
	// withHealth are the keys of the services that have health check
	// node ports, sorted: a sync sums theirs without walking every
	// Service.
	withHealth []types.NamespacedName
	// rechecking is set while a periodic recheck is under way; its next
	// step starts at the Service recheckFrom, or the first after it.
	rechecking  bool
	recheckFrom types.NamespacedName
	// staleUDP are UDP endpoints removed by the last renders, whose
	// conntrack entries go once the rules without them are applied.
	staleUDP []udpPort
	// udpChanged: a render since the last conntrack cleanup touched a UDP
	// service port, so flows that its rules no longer (or not yet) send
	// where they go may exist.
	udpChanged bool
	// handover is the node's ownership between kube-proxy and the agent
	// (handover.go); removeLeftovers removes kube-proxy's rules of every
	// mode and svcnet's of the other mode.
	handover        handover
	removeLeftovers func(ctx context.Context)
	// healthListening: the health server holds its address, which
	// kube-proxy holds while it runs on the node.
	healthListening atomic.Bool
	// accounting reads the node's nfacct counters for the metrics; nil
	// outside iptables mode or where the kernel has no nfacct.
	accounting *nfacct.Client
}

// serviceState is what the agent keeps of one Service between syncs,
// beside the rules its backends keep.
type serviceState struct {
	health []healthPort
	udp    map[string]udpPort // by port name and family
	// inputs names the versions of the objects the Service was rendered
	// from (see inputsOf).
	inputs string
	// noLocal counts the ports that drop traffic for want of a local
	// endpoint, by family.
	noLocal map[corev1.IPFamily]noLocalCounts
}

// changeTrigger is an EndpointSlice's last-change-trigger-time and the IP
// family of its addresses.
type changeTrigger struct {
	family corev1.IPFamily
	at     time.Time
}

type healthPort struct {
	port  int32
	entry healthEntry
}

type udpPort struct {
	dests    []netip.Addr // cluster, external and load-balancer IPs
	port     int32        // the service port on those addresses
	nodePort int32
	// endpoints are the serving endpoints' addresses and target ports:
	// a target port that changes on the same Pod makes its flows stale.
	endpoints map[netip.AddrPort]bool
}

// sliceServiceIndex indexes EndpointSlices by their Service's
// types.NamespacedName String(), so that re-rendering one Service reads
// only its slices.
const sliceServiceIndex = "svcnet.io/service"

// sliceService is the Service an EndpointSlice belongs to, by its label.
func sliceService(obj client.Object) (types.NamespacedName, bool) {
	name := obj.GetLabels()[discoveryv1.LabelServiceName]
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, name != ""
}

// sliceServiceIndexValue is sliceServiceIndex's indexer.
func sliceServiceIndexValue(obj client.Object) []string {
	if svc, ok := sliceService(obj); ok {
		return []string{svc.String()}
	}
	return nil
}

// notHeadlessSlices selects the EndpointSlices the agent watches: not
// those labelled service.kubernetes.io/headless, as kube-proxy's
// informer does. The EndpointSlice controller copies the label from a
// Service to its slices, so a Service carrying it has no endpoints here
// (upstream's e2e "should implement service.kubernetes.io/headless").
func notHeadlessSlices() labels.Selector {
	req, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return labels.NewSelector().Add(*req)
}

// cacheOptions are what the agent's informers watch: its own Node only,
// and the EndpointSlices kube-proxy watches.
func cacheOptions(nodeName string) cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}:               {Field: fields.OneTermEqualSelector("metadata.name", nodeName)},
			&discoveryv1.EndpointSlice{}: {Label: notHeadlessSlices()},
		},
	}
}

// Run starts the agent and blocks until ctx ends.
func Run(ctx context.Context, restConfig *rest.Config, cfg Config, log logr.Logger) error {
	restConfig = rest.CopyConfig(restConfig)
	restConfig.UserAgent = "svcnet-agent"
	direct, err := client.New(restConfig, client.Options{Scheme: scheme.New()})
	if err != nil {
		return fmt.Errorf("creating agent client: %w", err)
	}
	if cfg, err = prepareNode(ctx, direct, cfg, log); err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Logger: log,
		// The agent serves its metrics and health itself, as kube-proxy
		// does, retrying while another process holds an address.
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		PprofBindAddress:       cfg.PprofBindAddress,
		Scheme:                 scheme.New(),
		NewCache:               informersync.NewCache,
		Cache:                  cacheOptions(cfg.NodeName),
	})
	if err != nil {
		return fmt.Errorf("creating agent manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, sliceServiceIndexValue); err != nil {
		return err
	}
	a, err := New(mgr.GetCache(), cfg, log)
	if err != nil {
		return err
	}
	recorder := mgr.GetEventRecorder("svcnet-agent")
	a.health.recorder = recorder
	for _, obj := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Node{}, &networkingv1.ServiceCIDR{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(a.handler()); err != nil {
			return err
		}
	}
	if err := addServers(mgr, restConfig, cfg, a, nodeEventer(recorder, cfg.NodeName), log); err != nil {
		return err
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches did not sync")
		}
		return a.Loop(ctx)
	})); err != nil {
		return err
	}
	// The speaker announcing LoadBalancer addresses runs beside the
	// rules, from the same caches.
	if err := announce.Setup(mgr, announce.Config{Node: cfg.NodeName, NetNS: cfg.NetNS, Options: cfg.Announce}, log); err != nil {
		return err
	}
	registerMetrics(cfg.Mode)
	initFailureCounters(cfg.Mode, a.families())
	if a.accounting != nil {
		defer exportAccounting(ctrlmetrics.Registry, a.accounting, log)()
	}
	if !cfg.Announce.Enabled {
		if err := exitOnNodeDeletion(ctx, mgr, cfg.NodeName); err != nil {
			return err
		}
	}
	log.Info("Starting svcnet agent", "node", cfg.NodeName, "mode", cfg.Mode, "netns", cfg.NetNS)
	return mgr.Start(ctx)
}

// addServers adds the agent's health and metrics servers at kube-proxy's
// addresses, and its birth cry, with kube-proxy's Events on the Node.
func addServers(mgr manager.Manager, restConfig *rest.Config, cfg Config, a *Agent, nodeEvent func(eventType, reason, note string), log logr.Logger) error {
	if cfg.HealthzBindAddress != "0" {
		if err := mgr.Add(&healthzServer{addr: cfg.HealthzBindAddress, agent: a, log: log,
			onBlocked: func(err error) { nodeEvent(corev1.EventTypeWarning, EventFailedToStartProxierHealthcheck, err.Error()) }}); err != nil {
			return err
		}
	}
	if cfg.MetricsBindAddress != "0" {
		if err := mgr.Add(&retryingServer{what: "Metrics server", addr: cfg.MetricsBindAddress, handler: metricsHandler(cfg), log: log,
			onBlocked: func(err error) { nodeEvent(corev1.EventTypeWarning, EventFailedToStartMetricServer, err.Error()) }}); err != nil {
			return err
		}
	}
	if cfg.API.BindAddress != "0" {
		if err := mgr.Add(&apiServer{opts: cfg.API, agent: a, restCfg: restConfig, log: log,
			onBlocked: func(err error) { nodeEvent(corev1.EventTypeWarning, EventFailedToStartAPIServer, err.Error()) }}); err != nil {
			return err
		}
	}
	// kube-proxy's birth cry: a Normal Event "Starting" on its Node.
	return mgr.Add(manager.RunnableFunc(func(context.Context) error {
		nodeEvent(corev1.EventTypeNormal, EventStarting, "")
		return nil
	}))
}

// errNodeDeleted ends the agent when its Node is deleted.
var errNodeDeleted = errors.New("the node's Node object was deleted")

// exitOnNodeDeletion ends the agent, with an error, when its Node is
// deleted, as kube-proxy exits then. Only without the speaker: an agent
// that announces LoadBalancer addresses keeps running to hand them over
// (/healthz answers 503 while its Node is missing, docs/operations.md).
func exitOnNodeDeletion(ctx context.Context, mgr manager.Manager, nodeName string) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	deleted := make(chan struct{})
	var once sync.Once
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if n, ok := obj.(*corev1.Node); ok && n.Name == nodeName {
			once.Do(func() { close(deleted) })
		}
	}}); err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-deleted:
			return fmt.Errorf("%w (%s), exiting as kube-proxy does", errNodeDeleted, nodeName)
		}
	}))
}

// New builds an agent that reads the world from reader and programs the
// node with the backends of cfg.Mode.
func New(reader client.Reader, cfg Config, log logr.Logger) (*Agent, error) {
	if cfg.LocalhostNodePorts {
		// kube-proxy exits here; the agent runs with what it was given
		// instead (a DaemonSet that is not privileged mounts /proc/sys
		// read-only) and keeps loopback out of its NodePort rules, which
		// would not work without the sysctl.
		if err := enableRouteLocalnet(cfg, log); err != nil {
			log.Error(err, "Localhost NodePorts are off: route_localnet cannot be set; run the agent privileged, or set --nodeport-addresses or --iptables-localhost-nodeports=false to silence this")
			cfg.LocalhostNodePorts = false
		}
	}
	acct := openAccounting(cfg, log)
	backends, err := newBackends(cfg, acct, log)
	if err != nil {
		return nil, err
	}
	a := newAgent(reader, cfg, log, clock.RealClock{}, backends)
	a.accounting = acct
	// The other mode's rules go only once this mode's serve: a node moving
	// between modes, or from kube-proxy, is never without rules.
	a.removeLeftovers = func(ctx context.Context) { removeOtherModes(ctx, cfg, log) }
	return a, nil
}

// newAgent builds an agent on the given backends, one per IP family. Its
// first sync, of everything, is queued from now.
func newAgent(reader client.Reader, cfg Config, log logr.Logger, clk clock.WithTicker, backends []dataplane.Backend) *Agent {
	a := &Agent{
		cfg:      cfg,
		reader:   reader,
		log:      log,
		clock:    clk,
		backends: backends,
		trigger:  make(chan struct{}, 1),
		views:    make(chan viewQuery),
		dirty:    map[types.NamespacedName]bool{},
		allDirty: true,
		queuedAt: familyTimes{},
		services: map[types.NamespacedName]*serviceState{},
		noLocal:  map[corev1.IPFamily]noLocalCounts{},
		handover: handover{leftoversDue: cfg.ProxyName == ""},
		// kube-proxy's trackers start with the proxier.
		startedAt:      clk.Now(),
		serviceChanges: map[types.NamespacedName]bool{},
		familyUpdated:  map[corev1.IPFamily]time.Time{},
		familyBehind:   familyTimes{},
	}
	for _, b := range backends {
		a.familyUpdated[b.Family()] = a.startedAt
		a.queuedAt.note(b.Family(), a.startedAt)
	}
	a.health = newHealthServers(cfg.NetNS, cfg.NodeName, log, func() bool { return a.Health().Healthy })
	return a
}

// handler queues what each event touches. The objects of the informers'
// initial lists are skipped: the agent's first sync is full and starts once
// the caches have synced, so it reads every one of them already, and
// re-reading them all after it (50,000 Services: most of a second) held
// back the first changes.
func (a *Agent) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if !isInInitialList {
				a.changed(nil, obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			a.changed(old, obj)
		},
		DeleteFunc: func(obj any) {
			obj, _ = tombstone.Unwrap(obj)
			a.note(nil, obj, true)
		},
	}
}

// changed marks what an added or updated object touches as dirty and asks
// for a sync.
func (a *Agent) changed(old, obj any) {
	a.note(old, obj, false)
}

// note marks what an event touches as dirty and asks for a sync.
func (a *Agent) note(old, obj any, deleted bool) {
	a.mu.Lock()
	queued := a.families()
	switch o := obj.(type) {
	case *corev1.Service:
		prev, _ := old.(*corev1.Service)
		queued = serviceFamilies(prev, o)
		key := client.ObjectKeyFromObject(o)
		a.dirty[key] = true
		a.serviceChanges[key] = true
		// kube-proxy's proxier of each family counts every Service event.
		metricServiceChangesTotal.Add(float64(len(a.backends)))
		metricServiceChangesPending.Set(float64(len(a.serviceChanges)))
	case *discoveryv1.EndpointSlice:
		if svc, ok := sliceService(o); ok {
			a.dirty[svc] = true
		}
		if prev, ok := old.(*discoveryv1.EndpointSlice); ok {
			if svc, ok := sliceService(prev); ok {
				a.dirty[svc] = true
			}
		}
		a.noteSliceLocked(o, deleted)
		queued = []corev1.IPFamily{corev1.IPFamily(o.AddressType)}
	case *corev1.Node:
		// The zone decides topology filtering for every Service, the
		// node's IPs which source ranges let the node's own traffic in.
		// Only those queue a change, in every family, as kube-proxy's
		// proxiers queue one on a change of the node's topology labels.
		queued = nil
		if prev, ok := old.(*corev1.Node); !ok || prev.Labels[corev1.LabelTopologyZone] != o.Labels[corev1.LabelTopologyZone] ||
			!slices.Equal(nodeIPs(prev), nodeIPs(o)) {
			a.allDirty = true
			queued = a.families()
		}
	case *networkingv1.ServiceCIDR:
		// Read by every sync (serviceCIDRs); no Service changes, and,
		// as for kube-proxy's proxiers, no change to wait on.
		queued = nil
	default:
		a.allDirty = true
	}
	a.noteQueuedLocked(queued)
	a.mu.Unlock()
	a.Trigger()
}

// serviceFamilies are the IP families whose rules a change of a Service
// from old (nil: none) to svc touches, as kube-proxy's proxier of a
// family sees a change only of Services with a ClusterIP of its family:
// none for a headless or ExternalName Service, which have no rules.
func serviceFamilies(old, svc *corev1.Service) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, s := range []*corev1.Service{old, svc} {
		if s == nil || s.Spec.Type == corev1.ServiceTypeExternalName || s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		for _, ip := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && !slices.Contains(out, ipfamily.Of(a)) {
				out = append(out, ipfamily.Of(a))
			}
		}
	}
	return out
}

// noteSliceLocked counts an EndpointSlice change of a family the node
// programs and keeps its trigger time, as kube-proxy's endpoints change
// tracker does: not a deleted slice's, whose time is its last update's,
// nor one from before the agent started.
func (a *Agent) noteSliceLocked(s *discoveryv1.EndpointSlice, deleted bool) {
	family := corev1.IPFamily(s.AddressType)
	if !slices.Contains(a.families(), family) {
		return
	}
	metricEndpointChangesTotal.Inc()
	a.endpointChanges++
	metricEndpointChangesPending.Set(float64(a.endpointChanges))
	if deleted {
		return
	}
	if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil && t.After(a.startedAt) {
			a.triggers = append(a.triggers, changeTrigger{family: family, at: t})
		}
	}
}

// families are the IP families the node programs.
func (a *Agent) families() []corev1.IPFamily {
	out := make([]corev1.IPFamily, 0, len(a.backends))
	for _, b := range a.backends {
		out = append(out, b.Family())
	}
	return out
}

// noteQueuedLocked records a change of families (those the node
// programs), for health: when the oldest change of each that no sync has
// taken yet was queued.
func (a *Agent) noteQueuedLocked(families []corev1.IPFamily) {
	now := a.clock.Now()
	for _, f := range families {
		if !slices.Contains(a.families(), f) {
			continue
		}
		a.queuedAt.note(f, now)
		metricSyncLastQueuedTimestamp.WithLabelValues(string(f)).Set(unixSeconds(now))
	}
}

// familyTimes are times by IP family, such as when the oldest change of
// each family still waiting was queued; a family without one is absent.
type familyTimes map[corev1.IPFamily]time.Time

// note keeps t for family f unless f holds an earlier time.
func (ft familyTimes) note(f corev1.IPFamily, t time.Time) {
	if cur, ok := ft[f]; !ok || t.Before(cur) {
		ft[f] = t
	}
}

// earliest is the earliest time of any family; zero when there is none.
func (ft familyTimes) earliest() time.Time {
	var out time.Time
	for _, t := range ft {
		out = earliest(out, t)
	}
	return out
}

// Trigger asks for a sync soon; bursts coalesce into one.
func (a *Agent) Trigger() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Loop syncs on every trigger (no more often than --min-sync-period),
// rechecks every --sync-period in steps between the syncs, and retries
// failures with backoff until ctx ends.
func (a *Agent) Loop(ctx context.Context) error {
	defer a.health.closeAll()
	resync := a.clock.NewTicker(a.cfg.SyncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := retryMin
	last := time.Time{}
	go a.watchFlushes(ctx)
	// The first sync's work, everything the informers listed, counts as
	// queued now, as kube-proxy's sync loop has it.
	a.mu.Lock()
	a.noteQueuedLocked(a.families())
	a.mu.Unlock()
	a.Trigger()
	for {
		var step <-chan struct{}
		if a.rechecking {
			step = ready
		}
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C():
			a.periodicResync()
		case <-a.trigger:
		case <-retry:
		case <-step:
			a.recheckStep(ctx)
			continue
		case q := <-a.views:
			a.answer(q)
			continue
		}
		if wait := a.cfg.MinSyncPeriod - a.clock.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-a.clock.After(wait):
			}
		}
		last = a.clock.Now()
		if err := a.SyncOnce(ctx); err != nil {
			a.log.Error(err, "Sync failed, retrying", "in", backoff)
			retry = a.clock.After(backoff)
			backoff = min(backoff*2, retryMax)
			continue
		}
		retry = nil
		backoff = retryMin
	}
}

// periodicResync starts a recheck of every rendered Service against the
// objects the cache holds (recheckStep), unless one is under way. Once
// per fullSyncPeriod it re-renders every Service instead and the backends
// rewrite everything, as kube-proxy does: a full rewrite or re-render of a
// large cluster is slow (BENCHMARKS.md (h), (i)), and a periodic one would
// hold every change back that long.
func (a *Agent) periodicResync() {
	a.mu.Lock()
	full := a.clock.Since(a.lastFull) >= fullSyncPeriod
	a.allDirty = a.allDirty || full
	a.mu.Unlock()
	if full {
		for _, b := range a.backends {
			b.ForceFull()
		}
		a.rechecking = false
		return
	}
	if !a.rechecking {
		a.rechecking, a.recheckFrom = true, types.NamespacedName{}
	}
}

// recheckStep compares the next recheckChunk rendered Services with the
// objects the cache holds now and queues those that changed unseen, as
// their events would have. Services the agent never rendered are found by
// their events and by the hourly full resync.
func (a *Agent) recheckStep(ctx context.Context) {
	i, _ := slices.BinarySearchFunc(a.order, a.recheckFrom, compareKeys)
	end := min(i+recheckChunk, len(a.order))
	node, err := a.nodeModel(ctx)
	if err != nil {
		// The sync that follows any change fails on it and says so.
		a.log.V(1).Info("Periodic recheck stopped", "err", err.Error())
		a.rechecking = false
		return
	}
	var stale []types.NamespacedName
	for _, k := range a.order[i:end] {
		svc, endpointSlices, err := a.readService(ctx, k)
		if err != nil || svc == nil || a.services[k].inputs != inputsOf(node, svc, endpointSlices) {
			stale = append(stale, k)
		}
	}
	if end < len(a.order) {
		a.recheckFrom = a.order[end]
	} else {
		a.rechecking = false
	}
	a.mu.Lock()
	if !a.rechecking {
		a.recheckPasses++
	}
	for _, k := range stale {
		a.dirty[k] = true
	}
	if len(stale) > 0 {
		// Which objects changed is not known: every family waits.
		a.noteQueuedLocked(a.families())
	}
	a.mu.Unlock()
	if len(stale) > 0 {
		metricUnseenChanges.Add(float64(len(stale)))
		a.log.Info("Re-rendering Services whose objects changed since their last render without an event", "services", stale)
		a.Trigger()
	}
}

// pending is the work a sync takes over: what changed since the last one.
type pending struct {
	triggers []changeTrigger
	dirty    map[types.NamespacedName]bool
	all      bool
	// queuedAt is when the oldest of these changes was queued, by family.
	queuedAt familyTimes
}

// takePending hands the changes recorded so far to a sync.
func (a *Agent) takePending() pending {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := pending{triggers: a.triggers, dirty: a.dirty, all: a.allDirty, queuedAt: a.queuedAt}
	a.triggers, a.dirty, a.allDirty = nil, map[types.NamespacedName]bool{}, false
	a.syncingQueuedAt, a.queuedAt = maps.Clone(a.queuedAt), familyTimes{}
	// Taken, as kube-proxy's trackers check their changes out.
	clear(a.serviceChanges)
	a.endpointChanges = 0
	metricServiceChangesPending.Set(0)
	metricEndpointChangesPending.Set(0)
	return p
}

// failed records why a sync failed and returns its changes, so that the
// next sync does them and health counts their wait from when they were
// first queued.
func (a *Agent) failed(p pending, reason string, err error) error {
	metricSyncFailures.WithLabelValues(reason).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failure = &syncFailure{reason: reason, err: err}
	a.triggers = append(a.triggers, p.triggers...)
	for k := range p.dirty {
		a.dirty[k] = true
	}
	a.allDirty = a.allDirty || p.all
	for f, t := range p.queuedAt {
		a.queuedAt.note(f, t)
	}
	a.syncingQueuedAt = familyTimes{}
	return fmt.Errorf("%s: %w", reason, err)
}

// SyncOnce re-renders the Services that changed and applies the rules of
// every family once.
func (a *Agent) SyncOnce(ctx context.Context) error {
	ctx = logr.NewContext(ctx, a.log) // the backends log through it
	start := a.clock.Now()
	work := a.takePending()
	a.takeLeftoverRecheck()
	n, err := a.readNode(ctx)
	if err != nil {
		return a.failed(work, ReasonNode, err)
	}
	node := a.nodeModelOf(n)
	standby := n != nil && kubeProxyOwns(n)
	if err := a.render(ctx, node, work); err != nil {
		return a.failed(work, ReasonRender, err)
	}
	if standby {
		a.standBy(ctx)
		return nil
	}
	a.takeOver()
	nodePortIPs, err := a.nodePortIPs()
	if err != nil {
		return a.failed(work, ReasonNodeAddresses, err)
	}
	serviceCIDRs, err := a.serviceCIDRs(ctx)
	if err != nil {
		return a.failed(work, ReasonRender, err)
	}
	rendered := a.clock.Now()
	res, refused, err := a.apply(ctx, nodePortIPs, serviceCIDRs, rendered.Sub(start))
	a.health.update(a.healthEntries(), healthAddrs(a.cfg.NodePortAddresses, nodePortIPs), refused)
	if err != nil {
		reason := ReasonApply
		if errors.Is(err, dataplane.ErrListRules) {
			reason = ReasonList
		}
		return a.failedApply(work, refused, reason, err)
	}
	a.recordSuccess(start, rendered, res, work.triggers)
	a.clearStaleUDP()
	a.afterApply(ctx)
	return nil
}

// nodeModel is what the model needs of this node's Node object
// (nodeModelOf).
func (a *Agent) nodeModel(ctx context.Context) (model.Node, error) {
	n, err := a.readNode(ctx)
	if err != nil {
		return model.Node{Name: a.cfg.NodeName}, err
	}
	return a.nodeModelOf(n), nil
}

// readNode reads this node's Node from the cache: nil when it does not
// exist (yet). Any other error fails the sync rather than rendering every
// Service as if the node had no zone.
func (a *Agent) readNode(ctx context.Context) (*corev1.Node, error) {
	var n corev1.Node
	switch err := a.reader.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, &n); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Node %s: %w", a.cfg.NodeName, err)
	}
	return &n, nil
}

// nodeModelOf is what the model needs of a Node: its zone and primary
// IPs; a Node that does not exist has neither.
func (a *Agent) nodeModelOf(n *corev1.Node) model.Node {
	node := model.Node{Name: a.cfg.NodeName}
	if n != nil {
		node.Zone = n.Labels[corev1.LabelTopologyZone]
		node.IPs = primaryIPs(n, a.cfg.BindAddress)
	}
	return node
}

// nodeIPs are a Node's primary addresses as kube-proxy picks them: the
// first InternalIP, else the first ExternalIP, and then the first address
// of the other family in the same order.
func nodeIPs(n *corev1.Node) []netip.Addr {
	if n == nil {
		return nil
	}
	var all []netip.Addr
	for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, ad := range n.Status.Addresses {
			if ad.Type != typ {
				continue
			}
			if ip, err := netip.ParseAddr(strings.TrimSpace(ad.Address)); err == nil {
				all = append(all, ip.Unmap())
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	out := all[:1:1]
	for _, ip := range all[1:] {
		if ip.Is4() != out[0].Is4() {
			return append(out, ip)
		}
	}
	return out
}

// serviceCIDRs are the ranges of every ServiceCIDR object, whatever its
// state, as kube-proxy collects them.
func (a *Agent) serviceCIDRs(ctx context.Context) ([]netip.Prefix, error) {
	var list networkingv1.ServiceCIDRList
	if err := a.reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ServiceCIDRs: %w", err)
	}
	var out []netip.Prefix
	for _, sc := range list.Items {
		for _, c := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(c)
			if err != nil {
				a.log.Error(err, "Ignoring a range of a ServiceCIDR", "serviceCIDR", sc.Name, "cidr", c)
				continue
			}
			if !slices.Contains(out, p.Masked()) {
				out = append(out, p.Masked())
			}
		}
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int {
		if c := x.Addr().Compare(y.Addr()); c != 0 {
			return c
		}
		return x.Bits() - y.Bits()
	})
	return out, nil
}

// apply syncs every backend; a failed one does not keep the others from
// applying their rules. Each family's sync is observed as taking the
// render's time, renderTook, and its own. refused are the families whose
// backend failed.
func (a *Agent) apply(ctx context.Context, nodePortIPs []netip.Addr, serviceCIDRs []netip.Prefix, renderTook time.Duration) (total dataplane.SyncResult, refused []corev1.IPFamily, _ error) {
	var errs []error
	for _, b := range a.backends {
		node := dataplane.Node{}
		for _, ip := range nodePortIPs {
			if ipfamily.Of(ip) == b.Family() {
				node.NodePortIPs = append(node.NodePortIPs, ip)
			}
		}
		for _, p := range serviceCIDRs {
			if ipfamily.OfPrefix(p) == b.Family() {
				node.ServiceCIDRs = append(node.ServiceCIDRs, p)
			}
		}
		began := a.clock.Now()
		res, err := b.Sync(ctx, node)
		now := a.clock.Now()
		observeFamilySync(b.Mode(), b.Family(), res, renderTook+now.Sub(began), now, err)
		total.Full = total.Full || res.Full
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s rules: %w", b.Mode(), b.Family(), err))
			refused = append(refused, b.Family())
			continue
		}
		metricRulesWritten.Add(float64(res.Rules))
		total.Rules += res.Rules
	}
	return total, refused, errors.Join(errs...)
}

// failedApply records a sync that some families' backends applied and
// the refused ones' did not. Those that applied it are up to date, as a
// kube-proxy proxier whose own sync succeeded: their health, trigger
// times and no-local-endpoints counts are settled now. The refused ones
// keep the changes' wait and trigger times; their backends keep the
// rendered state and apply it in their next, full, sync.
func (a *Agent) failedApply(work pending, refused []corev1.IPFamily, reason string, err error) error {
	now := a.clock.Now()
	var applied []corev1.IPFamily
	for _, f := range a.families() {
		if !slices.Contains(refused, f) {
			applied = append(applied, f)
		}
	}
	var waiting []changeTrigger
	wall := time.Now() // trigger times come from the API server's clock
	for _, t := range work.triggers {
		if slices.Contains(refused, t.family) {
			waiting = append(waiting, t)
			continue
		}
		metricNetworkProgrammingDuration.WithLabelValues(string(t.family)).Observe(wall.Sub(t.at).Seconds())
	}
	setNoLocalEndpoints(a.noLocal, applied)
	a.mu.Lock()
	a.markUpdatedLocked(now, applied)
	for _, f := range refused {
		if t, ok := work.queuedAt[f]; ok {
			a.familyBehind.note(f, t)
		}
	}
	a.mu.Unlock()
	return a.failed(pending{triggers: waiting}, reason, err)
}

// markUpdatedLocked records that the backends of families applied every
// change that a sync took.
func (a *Agent) markUpdatedLocked(now time.Time, families []corev1.IPFamily) {
	for _, f := range families {
		a.familyUpdated[f] = now
		delete(a.familyBehind, f)
	}
}

// healthEntries sums the local endpoints behind each health check node
// port over the Services that use it.
func (a *Agent) healthEntries() map[int32]healthEntry {
	health := map[int32]healthEntry{}
	for _, k := range a.withHealth {
		for _, h := range a.services[k].health {
			e := health[h.port]
			e.namespace, e.name = h.entry.namespace, h.entry.name
			if e.local == nil {
				e.local = map[corev1.IPFamily]int{}
			}
			for f, n := range h.entry.local {
				e.local[f] += n
			}
			health[h.port] = e
		}
	}
	return health
}

// healthAddrs are the addresses that health check node ports listen on,
// by IP family, for the families that --nodeport-addresses restricts: as
// kube-proxy's per-family health check servers, those of its addresses
// that are the node's, and every address of a family it has no range of.
func healthAddrs(prefixes []netip.Prefix, nodePortIPs []netip.Addr) map[corev1.IPFamily][]netip.Addr {
	out := map[corev1.IPFamily][]netip.Addr{}
	for _, p := range prefixes {
		if f := ipfamily.OfPrefix(p); out[f] == nil {
			out[f] = []netip.Addr{}
		}
	}
	for _, ip := range nodePortIPs {
		if f := ipfamily.Of(ip); out[f] != nil {
			out[f] = append(out[f], ip)
		}
	}
	return out
}

// setMember puts key into the keys sorted by compareKeys, or takes it
// out, and returns them.
func setMember(keys []types.NamespacedName, key types.NamespacedName, in bool) []types.NamespacedName {
	i, found := slices.BinarySearchFunc(keys, key, compareKeys)
	switch {
	case in && !found:
		return slices.Insert(keys, i, key)
	case !in && found:
		return slices.Delete(keys, i, i+1)
	}
	return keys
}

// compareKeys orders Services by namespace, then name.
func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// recordSuccess updates the health state, the metrics and the log after a
// sync that applied everything.
func (a *Agent) recordSuccess(start, rendered time.Time, res dataplane.SyncResult, triggers []changeTrigger) {
	now := a.clock.Now()
	kind := "partial"
	a.mu.Lock()
	if res.Full {
		kind = "full"
		a.lastFull = now
	}
	a.lastSuccess, a.failure, a.syncingQueuedAt = now, nil, familyTimes{}
	a.markUpdatedLocked(now, a.families())
	a.mu.Unlock()
	setNoLocalEndpoints(a.noLocal, a.families())
	a.log.V(2).Info("Synced rules", "kind", kind, "services", len(a.order), "rulesWritten", res.Rules,
		"render", rendered.Sub(start), "apply", now.Sub(rendered))
	// Trigger times come from the API server's clock, not the agent's.
	wall := time.Now()
	for _, t := range triggers {
		metricNetworkProgrammingDuration.WithLabelValues(string(t.family)).Observe(wall.Sub(t.at).Seconds())
	}
}

// render rebuilds the state of the work's Services from the cache and
// hands their ports to the backends: every one when all is set, otherwise
// the dirty ones whose objects are not the versions they were last
// rendered from.
func (a *Agent) render(ctx context.Context, node model.Node, work pending) error {
	var changed changedServices
	var err error
	if work.all {
		changed, err = a.listAll(ctx)
	} else {
		changed, err = a.getDirty(ctx, work.dirty)
	}
	if err != nil {
		return err
	}
	for k := range changed.keys {
		svc, ok := changed.services[k]
		switch {
		case !ok:
			a.forgetService(k)
		case work.all:
			a.renderService(k, node, svc, changed.slices[k])
		case a.services[k] != nil && a.services[k].inputs == inputsOf(node, svc, changed.slices[k]):
			// Rendered from these very objects already: a notification that
			// arrived after the sync that read them (a relist's adds, an
			// update that the recheck queued too).
		default:
			a.renderService(k, node, svc, changed.slices[k])
		}
	}
	return nil
}

// inputsOf names what a Service's rules are built from: the node's zone
// and the versions of the Service and its slices.
func inputsOf(node model.Node, svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	b.WriteString(node.Zone)
	for _, ip := range node.IPs {
		b.WriteString("," + ip.String())
	}
	b.WriteString("/" + svc.ResourceVersion)
	names := make([]string, 0, len(endpointSlices))
	for _, s := range endpointSlices {
		names = append(names, s.Name+"@"+s.ResourceVersion)
	}
	slices.Sort(names)
	for _, n := range names {
		b.WriteString("/" + n)
	}
	return b.String()
}

// changedServices is what a render reads from the cache: the keys to
// re-render, the Services among them that exist, and their slices.
type changedServices struct {
	keys     map[types.NamespacedName]bool
	services map[types.NamespacedName]*corev1.Service
	slices   map[types.NamespacedName][]*discoveryv1.EndpointSlice
}

func newChangedServices() changedServices {
	return changedServices{
		keys:     map[types.NamespacedName]bool{},
		services: map[types.NamespacedName]*corev1.Service{},
		slices:   map[types.NamespacedName][]*discoveryv1.EndpointSlice{},
	}
}

// listAll reads every Service and slice; every Service known so far is
// re-rendered too, and forgotten unless listed again.
func (a *Agent) listAll(ctx context.Context) (changedServices, error) {
	c := newChangedServices()
	var services corev1.ServiceList
	if err := a.reader.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
		return c, err
	}
	var list discoveryv1.EndpointSliceList
	if err := a.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return c, err
	}
	for i := range list.Items {
		if k, ok := sliceService(&list.Items[i]); ok {
			c.slices[k] = append(c.slices[k], &list.Items[i])
		}
	}
	for k := range a.services {
		c.keys[k] = true
	}
	for i := range services.Items {
		k := client.ObjectKeyFromObject(&services.Items[i])
		c.keys[k] = true
		c.services[k] = &services.Items[i]
	}
	return c, nil
}

// getDirty reads the dirty Services and their slices.
func (a *Agent) getDirty(ctx context.Context, dirty map[types.NamespacedName]bool) (changedServices, error) {
	c := newChangedServices()
	for k := range dirty {
		c.keys[k] = true
		svc, endpointSlices, err := a.readService(ctx, k)
		if err != nil {
			return c, err
		}
		if svc != nil {
			c.services[k], c.slices[k] = svc, endpointSlices
		}
	}
	return c, nil
}

// readService reads one Service and its slices (through the slice index)
// from the cache, without copying what it holds: nothing that renders
// changes them. A Service that does not exist is nil.
func (a *Agent) readService(ctx context.Context, key types.NamespacedName) (*corev1.Service, []*discoveryv1.EndpointSlice, error) {
	var svc corev1.Service
	if err := a.reader.Get(ctx, key, &svc, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var list discoveryv1.EndpointSliceList
	if err := a.reader.List(ctx, &list, client.MatchingFields{sliceServiceIndex: key.String()}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, err
	}
	endpointSlices := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		endpointSlices[i] = &list.Items[i]
	}
	return &svc, endpointSlices, nil
}

// forgetService removes a Service that no longer exists.
func (a *Agent) forgetService(key types.NamespacedName) {
	old := a.services[key]
	if old == nil {
		return
	}
	for _, b := range a.backends {
		b.SetService(key, nil)
	}
	a.forgetUDP(old, nil)
	a.udpChanged = a.udpChanged || len(old.udp) > 0
	a.countNoLocal(old, -1)
	delete(a.services, key)
	a.order = setMember(a.order, key, false)
	a.withHealth = setMember(a.withHealth, key, false)
}

// renderService builds one Service's ports for every family, hands them to
// the family's backend, and keeps what the agent itself serves or cleans
// up for them: health check node ports and UDP endpoints.
func (a *Agent) renderService(key types.NamespacedName, node model.Node, svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) {
	st := &serviceState{udp: map[string]udpPort{}, inputs: inputsOf(node, svc, endpointSlices), noLocal: map[corev1.IPFamily]noLocalCounts{}}
	if bad := model.InvalidSourceRanges(svc.Spec.LoadBalancerSourceRanges); len(bad) > 0 {
		a.log.Error(nil, "Invalid loadBalancerSourceRanges ignored", "service", key, "ranges", bad)
	}
	health := healthCounter{}
	for _, b := range a.backends {
		ports := model.BuildService(b.Family(), node, svc, endpointSlices, model.Options{ProxyName: a.cfg.ProxyName})
		b.SetService(key, ports)
		for _, p := range ports {
			health.add(b.Family(), p)
			st.noLocal[b.Family()] = st.noLocal[b.Family()].plus(noLocalOf(p), 1)
			if p.Protocol == corev1.ProtocolUDP {
				st.udp[p.Name+"/"+string(b.Family())] = udpPortOf(p)
			}
		}
	}
	st.health = health.ports()
	a.udpChanged = a.udpChanged || len(st.udp) > 0
	if old := a.services[key]; old != nil {
		a.udpChanged = a.udpChanged || len(old.udp) > 0
		a.forgetUDP(old, st)
		a.countNoLocal(old, -1)
	}
	a.countNoLocal(st, 1)
	a.services[key] = st
	a.order = setMember(a.order, key, true)
	a.withHealth = setMember(a.withHealth, key, len(st.health) > 0)
}

// countNoLocal adds a Service's ports without local endpoints to the
// totals (sign 1) or takes them out (-1).
func (a *Agent) countNoLocal(st *serviceState, sign int) {
	for f, c := range st.noLocal {
		a.noLocal[f] = a.noLocal[f].plus(c, sign)
	}
}

// noLocalOf is 1 for each traffic policy of the port that is Local and
// finds no local endpoint while the port has endpoints elsewhere:
// kube-proxy's DROP "has no local endpoints" rules.
func noLocalOf(p *model.ServicePort) noLocalCounts {
	var c noLocalCounts
	if !p.HasEndpoints || len(p.LocalEndpoints) > 0 {
		return c
	}
	if p.InternalPolicyLocal {
		c.internal = 1
	}
	if p.ExternalPolicyLocal {
		c.external = 1
	}
	return c
}

// healthCounter gathers a Service's health check node port from its
// ports: kube-proxy's count of local ready endpoints, which are distinct
// addresses (an endpoint serving two ports is one), per IP family.
type healthCounter struct {
	port            int32
	namespace, name string
	ready           map[corev1.IPFamily]map[netip.Addr]bool
}

func (c *healthCounter) add(family corev1.IPFamily, p *model.ServicePort) {
	if p.HealthCheckNodePort == 0 {
		return
	}
	c.port, c.namespace, c.name = p.HealthCheckNodePort, p.Namespace, p.Service
	if c.ready == nil {
		c.ready = map[corev1.IPFamily]map[netip.Addr]bool{}
	}
	if c.ready[family] == nil {
		c.ready[family] = map[netip.Addr]bool{}
	}
	for _, ep := range p.LocalEndpoints {
		// A terminating endpoint still gets traffic while no ready one
		// exists, but the node is reported unhealthy so that load
		// balancers drain it.
		if ep.Ready {
			c.ready[family][ep.IP] = true
		}
	}
}

func (c *healthCounter) ports() []healthPort {
	if c.port == 0 {
		return nil
	}
	e := healthEntry{namespace: c.namespace, name: c.name, local: map[corev1.IPFamily]int{}}
	for f, ips := range c.ready {
		e.local[f] = len(ips)
	}
	return []healthPort{{port: c.port, entry: e}}
}

// udpPortOf is what conntrack cleanup needs of a UDP service port: its
// addresses and its serving endpoints. Every serving endpoint counts,
// wherever it runs and whatever the traffic policies and topology pick,
// as with kube-proxy: a flow to a terminating endpoint that still serves
// is kept, as its TCP connections would be.
func udpPortOf(p *model.ServicePort) udpPort {
	u := udpPort{port: p.Port, nodePort: p.NodePort, endpoints: map[netip.AddrPort]bool{}}
	u.dests = append(u.dests, p.ClusterIP)
	u.dests = append(u.dests, p.ExternalIPs...)
	u.dests = append(u.dests, p.LoadBalancerIPs...)
	for _, ep := range p.ServingEndpoints {
		u.endpoints[netip.AddrPortFrom(ep.IP, uint16(ep.Port))] = true
	}
	return u
}

// nodePortIPs lists the local addresses inside --nodeport-addresses; nil
// means every local address.
func (a *Agent) nodePortIPs() ([]netip.Addr, error) {
	prefixes := a.cfg.NodePortAddresses
	if len(prefixes) == 0 {
		return nil, nil
	}
	addrs, err := netns.LocalAddrs(a.cfg.NetNS)
	if err != nil {
		return nil, fmt.Errorf("listing local addresses: %w", err)
	}
	var out []netip.Addr
	for _, ad := range addrs {
		ipn, ok := ad.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		for _, p := range prefixes {
			if p.Contains(ip) {
				out = append(out, ip)
				break
			}
		}
	}
	return out, nil
}
