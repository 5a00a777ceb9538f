package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/informersync"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Backoff bounds for retrying a failed sync.
const (
	// fullSyncPeriod is how often a periodic resync rewrites every chain
	// (kube-proxy's FullSyncPeriod).
	fullSyncPeriod = time.Hour
	retryMin       = 100 * time.Millisecond
	retryMax       = 10 * time.Second
)

// Agent is one node's proxy.
type Agent struct {
	opts   Options
	reader client.Reader
	log    logr.Logger

	families []family
	health   *healthServers

	trigger chan struct{}

	mu          sync.Mutex
	lastSuccess time.Time
	lastErr     error
	lastFull    time.Time
	// triggers are the last-change-trigger-times of slices changed since
	// the last successful sync, for the network programming latency.
	triggers []time.Time
	// dirty holds the "namespace/name" of Services whose objects changed
	// since they were last rendered; allDirty re-renders every Service.
	dirty    map[string]bool
	allDirty bool

	// Owned by the sync loop.
	services map[string]*serviceState
	order    []string // keys of services, sorted
	// staleUDP are UDP endpoints removed by the last renders, whose
	// conntrack entries go once the rules without them are applied.
	staleUDP []udpPort
}

// serviceState is what the agent keeps of one Service between syncs.
type serviceState struct {
	frags  map[corev1.IPFamily]*iptables.Fragment
	health []healthPort
	udp    map[string]udpPort // by port name and family
}

type healthPort struct {
	port  int32
	entry healthEntry
}

type family struct {
	ip     corev1.IPFamily
	syncer *iptables.Syncer
	cidrs  []netip.Prefix
}

type udpPort struct {
	dests     []string // cluster, external and load-balancer IPs
	nodePort  int32
	endpoints map[netip.Addr]bool
}

// sliceServiceIndex indexes EndpointSlices by "namespace/service", so that
// re-rendering one Service reads only its slices.
const sliceServiceIndex = "svcnet.io/service"

func sliceServiceKey(obj client.Object) []string {
	if name := obj.GetLabels()[discoveryv1.LabelServiceName]; name != "" {
		return []string{obj.GetNamespace() + "/" + name}
	}
	return nil
}

// Run starts the agent and blocks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options, log logr.Logger) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "svcnet-agent"
	healthAddr := opts.HealthzBindAddress
	if healthAddr == "" {
		healthAddr = "0"
	}
	metricsAddr := opts.MetricsBindAddress
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: healthAddr,
		NewCache:               informersync.NewCache,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Node{}: {Field: fields.OneTermEqualSelector("metadata.name", opts.NodeName)},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating agent manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &discoveryv1.EndpointSlice{}, sliceServiceIndex, sliceServiceKey); err != nil {
		return err
	}
	a, err := New(mgr.GetCache(), opts, log)
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}, &corev1.Node{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(a.handler()); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("sync", a.Healthz); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("sync", a.Healthz); err != nil {
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
	registerMetrics()
	log.Info("Starting svcnet agent", "node", opts.NodeName, "mode", opts.Mode, "netns", opts.NetNS)
	return mgr.Start(ctx)
}

// New builds an agent that reads the world from reader and programs
// iptables (IPv6 too when ip6tables works).
func New(reader client.Reader, opts Options, log logr.Logger) (*Agent, error) {
	backends := map[corev1.IPFamily]iptables.Interface{}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		ipt := iptables.NewExec(f, opts.NetNS)
		if f == corev1.IPv6Protocol {
			if _, err := ipt.Save(context.Background(), "filter"); err != nil {
				log.Info("IPv6 rules disabled: ip6tables is not usable", "err", err.Error())
				continue
			}
		}
		backends[f] = ipt
	}
	return newAgent(reader, opts, log, backends)
}

// newAgent builds an agent on the given backends, one per IP family.
func newAgent(reader client.Reader, opts Options, log logr.Logger, backends map[corev1.IPFamily]iptables.Interface) (*Agent, error) {
	cidrs, err := opts.clusterCIDRs()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:     opts,
		reader:   reader,
		log:      log,
		health:   newHealthServers(opts.NetNS, log),
		trigger:  make(chan struct{}, 1),
		dirty:    map[string]bool{},
		allDirty: true,
		services: map[string]*serviceState{},
	}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		ipt, ok := backends[f]
		if !ok {
			continue
		}
		fam := family{ip: f, syncer: iptables.NewSyncer(ipt)}
		for _, c := range cidrs {
			if c.Addr().Is4() == (f == corev1.IPv4Protocol) {
				fam.cidrs = append(fam.cidrs, c)
			}
		}
		a.families = append(a.families, fam)
	}
	return a, nil
}

func (a *Agent) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { a.changed(nil, obj) },
		UpdateFunc: func(old, obj any) {
			a.changed(old, obj)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			a.changed(nil, obj)
		},
	}
}

// changed marks what an event touches as dirty and asks for a sync.
func (a *Agent) changed(old, obj any) {
	a.mu.Lock()
	switch o := obj.(type) {
	case *corev1.Service:
		a.dirty[o.Namespace+"/"+o.Name] = true
	case *discoveryv1.EndpointSlice:
		for _, k := range sliceServiceKey(o) {
			a.dirty[k] = true
		}
		if prev, ok := old.(*discoveryv1.EndpointSlice); ok {
			for _, k := range sliceServiceKey(prev) {
				a.dirty[k] = true
			}
		}
		if v, ok := o.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				a.triggers = append(a.triggers, t)
			}
		}
	case *corev1.Node:
		// The zone decides topology filtering for every Service.
		if prev, ok := old.(*corev1.Node); !ok || prev.Labels[corev1.LabelTopologyZone] != o.Labels[corev1.LabelTopologyZone] {
			a.allDirty = true
		}
	default:
		a.allDirty = true
	}
	a.mu.Unlock()
	a.Trigger()
}

// Trigger asks for a sync soon; bursts coalesce into one.
func (a *Agent) Trigger() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Loop syncs on every trigger (no more often than --min-sync-period), fully
// every --sync-period, and retries failures with backoff until ctx ends.
func (a *Agent) Loop(ctx context.Context) error {
	defer a.health.closeAll()
	resync := time.NewTicker(a.opts.SyncPeriod)
	defer resync.Stop()
	var retry <-chan time.Time
	backoff := retryMin
	last := time.Time{}
	a.Trigger()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C:
			// Re-render everything; rewrite every chain only once per
			// fullSyncPeriod, as kube-proxy does: on iptables-nft a full
			// restore of 10,000 Services takes minutes, and a periodic one
			// would hold every change back that long.
			a.mu.Lock()
			a.allDirty = true
			full := time.Since(a.lastFull) >= fullSyncPeriod
			a.mu.Unlock()
			if full {
				for _, f := range a.families {
					f.syncer.ForceFull()
				}
			}
		case <-a.trigger:
		case <-retry:
		}
		if wait := a.opts.MinSyncPeriod - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		if err := a.SyncOnce(ctx); err != nil {
			a.log.Error(err, "Sync failed, retrying", "in", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, retryMax)
			continue
		}
		retry = nil
		backoff = retryMin
	}
}

// SyncOnce re-renders the Services that changed and applies the rules of
// every family once.
func (a *Agent) SyncOnce(ctx context.Context) error {
	start := time.Now()
	a.mu.Lock()
	triggers, dirty, all := a.triggers, a.dirty, a.allDirty
	a.triggers, a.dirty, a.allDirty = nil, map[string]bool{}, false
	a.mu.Unlock()
	restore := func() {
		a.mu.Lock()
		a.triggers = append(a.triggers, triggers...)
		for k := range dirty {
			a.dirty[k] = true
		}
		a.allDirty = a.allDirty || all
		a.mu.Unlock()
	}

	node := model.Node{Name: a.opts.NodeName}
	var n corev1.Node
	if err := a.reader.Get(ctx, client.ObjectKey{Name: a.opts.NodeName}, &n); err == nil {
		node.Zone = n.Labels[corev1.LabelTopologyZone]
	}
	if err := a.render(ctx, node, dirty, all); err != nil {
		restore()
		return err
	}
	nodePortIPs, err := a.nodePortIPs()
	if err != nil {
		restore()
		return err
	}

	rendered := time.Now()
	var errs []error
	anyFull := false
	written := 0
	for _, f := range a.families {
		cfg := iptables.Config{MasqueradeAll: a.opts.MasqueradeAll}
		for _, ip := range nodePortIPs {
			if ip.Is4() == (f.ip == corev1.IPv4Protocol) {
				cfg.NodePortIPs = append(cfg.NodePortIPs, ip)
			}
		}
		frags := make([]*iptables.Fragment, 0, len(a.order))
		for _, k := range a.order {
			if fr := a.services[k].frags[f.ip]; fr != nil {
				frags = append(frags, fr)
			}
		}
		res, err := f.syncer.Sync(ctx, iptables.Assemble(frags, cfg))
		anyFull = anyFull || res.Full
		if err != nil {
			metricRestoreFailures.Inc()
			errs = append(errs, fmt.Errorf("%s rules: %w", f.ip, err))
			continue
		}
		metricRulesWritten.Add(float64(res.Rules))
		written += res.Rules
	}

	health := map[int32]healthEntry{}
	for _, k := range a.order {
		for _, h := range a.services[k].health {
			e := health[h.port]
			e.namespace, e.name = h.entry.namespace, h.entry.name
			e.local += h.entry.local
			health[h.port] = e
		}
	}
	a.health.update(health)
	if err := errors.Join(errs...); err != nil {
		// The rendered state is kept; the next sync is full and applies it.
		a.mu.Lock()
		a.lastErr = err
		a.triggers = append(a.triggers, triggers...)
		a.mu.Unlock()
		return err
	}
	now := time.Now()
	kind := "partial"
	if anyFull {
		kind = "full"
		a.mu.Lock()
		a.lastFull = now
		a.mu.Unlock()
	}
	metricSyncDuration.WithLabelValues(kind).Observe(now.Sub(start).Seconds())
	a.log.V(2).Info("Synced rules", "kind", kind, "services", len(a.order), "rulesWritten", written,
		"render", rendered.Sub(start), "apply", now.Sub(rendered))
	for _, t := range triggers {
		metricProgrammingLatency.Observe(now.Sub(t).Seconds())
	}
	a.clearStaleUDP(ctx)
	a.mu.Lock()
	a.lastSuccess, a.lastErr = now, nil
	a.mu.Unlock()
	return nil
}

// render rebuilds the state of the dirty Services (all of them when all is
// set) from the cache.
func (a *Agent) render(ctx context.Context, node model.Node, dirty map[string]bool, all bool) error {
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	var svcs []*corev1.Service
	if all {
		var services corev1.ServiceList
		if err := a.reader.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		var list discoveryv1.EndpointSliceList
		if err := a.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		for i := range list.Items {
			for _, k := range sliceServiceKey(&list.Items[i]) {
				bySvc[k] = append(bySvc[k], &list.Items[i])
			}
		}
		for i := range services.Items {
			svcs = append(svcs, &services.Items[i])
		}
		dirty = map[string]bool{}
		for k := range a.services {
			dirty[k] = true // gone unless listed again
		}
		for _, svc := range svcs {
			dirty[svc.Namespace+"/"+svc.Name] = true
		}
	} else {
		for k := range dirty {
			ns, name, _ := strings.Cut(k, "/")
			var svc corev1.Service
			if err := a.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return err
			}
			svcs = append(svcs, &svc)
			var list discoveryv1.EndpointSliceList
			if err := a.reader.List(ctx, &list, client.MatchingFields{sliceServiceIndex: k}, client.UnsafeDisableDeepCopy); err != nil {
				return err
			}
			for i := range list.Items {
				bySvc[k] = append(bySvc[k], &list.Items[i])
			}
		}
	}
	present := map[string]*corev1.Service{}
	for _, svc := range svcs {
		present[svc.Namespace+"/"+svc.Name] = svc
	}
	cidrs := map[corev1.IPFamily][]netip.Prefix{}
	for _, f := range a.families {
		cidrs[f.ip] = f.cidrs
	}
	for k := range dirty {
		old := a.services[k]
		svc, ok := present[k]
		if !ok {
			if old != nil {
				a.forgetUDP(old, nil)
				delete(a.services, k)
				if i, found := slices.BinarySearch(a.order, k); found {
					a.order = slices.Delete(a.order, i, i+1)
				}
			}
			continue
		}
		st := &serviceState{frags: map[corev1.IPFamily]*iptables.Fragment{}, udp: map[string]udpPort{}}
		for _, f := range a.families {
			ports := model.BuildService(f.ip, node, svc, bySvc[k], model.Options{ProxyName: a.opts.ProxyName})
			if len(ports) == 0 {
				continue
			}
			st.frags[f.ip] = iptables.RenderService(ports, iptables.Config{ClusterCIDRs: cidrs[f.ip], MasqueradeAll: a.opts.MasqueradeAll})
			for _, p := range ports {
				if p.HealthCheckNodePort != 0 {
					st.health = append(st.health, healthPort{port: p.HealthCheckNodePort,
						entry: healthEntry{namespace: p.Namespace, name: p.Service, local: len(p.LocalEndpoints)}})
				}
				if p.Protocol == corev1.ProtocolUDP {
					u := udpPort{nodePort: p.NodePort, endpoints: map[netip.Addr]bool{}}
					u.dests = append(u.dests, p.ClusterIP.String())
					for _, ip := range append(slices.Clone(p.ExternalIPs), p.LoadBalancerIPs...) {
						u.dests = append(u.dests, ip.String())
					}
					for _, ep := range append(slices.Clone(p.ClusterEndpoints), p.LocalEndpoints...) {
						u.endpoints[ep.IP] = true
					}
					st.udp[p.Name+"/"+string(f.ip)] = u
				}
			}
		}
		if old != nil {
			a.forgetUDP(old, st)
		} else if i, found := slices.BinarySearch(a.order, k); !found {
			a.order = slices.Insert(a.order, i, k)
		}
		a.services[k] = st
	}
	return nil
}

// nodePortIPs lists the local addresses inside --nodeport-addresses; nil
// means every local address.
func (a *Agent) nodePortIPs() ([]netip.Addr, error) {
	prefixes, _ := a.opts.nodePortPrefixes()
	if len(prefixes) == 0 {
		return nil, nil
	}
	addrs, err := netns.LocalAddrs(a.opts.NetNS)
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

// Healthz fails when syncs have been failing for longer than a sync period.
func (a *Agent) Healthz(_ *http.Request) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastErr != nil && time.Since(a.lastSuccess) > a.opts.SyncPeriod {
		return fmt.Errorf("no successful sync since %s: %w", a.lastSuccess.Format(time.RFC3339), a.lastErr)
	}
	if a.lastSuccess.IsZero() {
		return errors.New("no sync yet")
	}
	return nil
}

var _ healthz.Checker = (*Agent)(nil).Healthz
