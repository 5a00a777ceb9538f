package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
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
	"github.com/svcnet-io/svcnet/internal/netns"
)

// Backoff bounds for retrying a failed sync.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second
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
	// triggers are the last-change-trigger-times of slices changed since
	// the last successful sync, for the network programming latency.
	triggers []time.Time
	// udp remembers the UDP endpoints programmed per service port, to
	// clear conntrack entries of the ones that go away.
	udp map[string]udpPort
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

// New builds an agent that reads the world from reader.
func New(reader client.Reader, opts Options, log logr.Logger) (*Agent, error) {
	cidrs, err := opts.clusterCIDRs()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		opts:    opts,
		reader:  reader,
		log:     log,
		health:  newHealthServers(opts.NetNS, log),
		trigger: make(chan struct{}, 1),
		udp:     map[string]udpPort{},
	}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		ipt := iptables.NewExec(f, opts.NetNS)
		if f == corev1.IPv6Protocol {
			if _, err := ipt.Save(context.Background(), "filter"); err != nil {
				log.Info("IPv6 rules disabled: ip6tables is not usable", "err", err.Error())
				continue
			}
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
		AddFunc:    func(obj any) { a.changed(obj) },
		UpdateFunc: func(_, obj any) { a.changed(obj) },
		DeleteFunc: func(obj any) { a.changed(obj) },
	}
}

func (a *Agent) changed(obj any) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				a.mu.Lock()
				a.triggers = append(a.triggers, t)
				a.mu.Unlock()
			}
		}
	}
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
			for _, f := range a.families {
				f.syncer.ForceFull()
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

// SyncOnce computes and applies the rules of every family once.
func (a *Agent) SyncOnce(ctx context.Context) error {
	start := time.Now()
	a.mu.Lock()
	triggers := a.triggers
	a.triggers = nil
	a.mu.Unlock()

	var services corev1.ServiceList
	if err := a.reader.List(ctx, &services, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var slices discoveryv1.EndpointSliceList
	if err := a.reader.List(ctx, &slices, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	node := model.Node{Name: a.opts.NodeName}
	var n corev1.Node
	if err := a.reader.Get(ctx, client.ObjectKey{Name: a.opts.NodeName}, &n); err == nil {
		node.Zone = n.Labels[corev1.LabelTopologyZone]
	}
	svcs := make([]*corev1.Service, 0, len(services.Items))
	for i := range services.Items {
		svcs = append(svcs, &services.Items[i])
	}
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for i := range slices.Items {
		s := &slices.Items[i]
		name := s.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			continue
		}
		k := s.Namespace + "/" + name
		bySvc[k] = append(bySvc[k], s)
	}
	nodePortIPs, err := a.nodePortIPs()
	if err != nil {
		return err
	}

	var errs []error
	anyFull := false
	health := map[int32]healthEntry{}
	programmed := map[string]udpPort{}
	for _, f := range a.families {
		m := model.Build(f.ip, node, svcs, bySvc, model.Options{ProxyName: a.opts.ProxyName})
		cfg := iptables.Config{ClusterCIDRs: f.cidrs, MasqueradeAll: a.opts.MasqueradeAll}
		for _, ip := range nodePortIPs {
			if ip.Is4() == (f.ip == corev1.IPv4Protocol) {
				cfg.NodePortIPs = append(cfg.NodePortIPs, ip)
			}
		}
		res, err := f.syncer.Sync(ctx, iptables.Render(m, cfg))
		anyFull = anyFull || res.Full
		if err != nil {
			metricRestoreFailures.Inc()
			errs = append(errs, fmt.Errorf("%s rules: %w", f.ip, err))
			continue
		}
		metricRulesWritten.Add(float64(res.Rules))
		for _, p := range m.Ports {
			if p.HealthCheckNodePort != 0 {
				h := health[p.HealthCheckNodePort]
				h.namespace, h.name = p.Namespace, p.Service
				h.local += len(p.LocalEndpoints)
				health[p.HealthCheckNodePort] = h
			}
			if p.Protocol == corev1.ProtocolUDP {
				u := udpPort{nodePort: p.NodePort, endpoints: map[netip.Addr]bool{}}
				u.dests = append(u.dests, p.ClusterIP.String())
				for _, ip := range append(p.ExternalIPs, p.LoadBalancerIPs...) {
					u.dests = append(u.dests, ip.String())
				}
				for _, ep := range append(p.ClusterEndpoints, p.LocalEndpoints...) {
					u.endpoints[ep.IP] = true
				}
				programmed[p.Name+"/"+string(f.ip)] = u
			}
		}
	}
	a.health.update(health)
	if err := errors.Join(errs...); err != nil {
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
	}
	metricSyncDuration.WithLabelValues(kind).Observe(now.Sub(start).Seconds())
	for _, t := range triggers {
		metricProgrammingLatency.Observe(now.Sub(t).Seconds())
	}
	a.clearStaleUDP(ctx, programmed)
	a.mu.Lock()
	a.lastSuccess, a.lastErr = now, nil
	a.mu.Unlock()
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
