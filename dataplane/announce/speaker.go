// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/bgp"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// resyncPeriod bounds how long a change the speaker missed (an interface
// appearing, say) goes unnoticed.
const resyncPeriod = 10 * time.Second

// Config is what the agent tells the speaker.
type Config struct {
	Node    string
	NetNS   string
	Options Options
}

// Speaker announces this node's share of the LoadBalancer addresses.
type Speaker struct {
	cfg     Config
	reader  client.Reader // the agent's cache: Services, slices, pools, announcements
	nodes   client.Reader // every Node
	report  *reportWriter
	log     logr.Logger
	trigger chan struct{}
	ifaces  *interfaces
	bgp     *bgp.Speaker
	// secrets reads the Secrets of Options.SecretNamespace, once a peer
	// needs a password; secretInformer is nil until then.
	secrets        cache.Cache
	secretInformer cache.Informer
	secretsWaited  bool
	// ifaceIPv4 is the node's first global IPv4 address when the speaker
	// started, a router ID for nodes whose InternalIPs are IPv6 only.
	ifaceIPv4 netip.Addr

	mu       sync.Mutex
	segments map[string]*segment // by interface name
	plan     plan
	// advertised are the addresses given to BGP, for its Events.
	advertised map[netip.Addr]bool
	// missing are the "announcement/interface" pairs reported missing.
	missing map[string]bool
	// passwordErrs are why peers are left out, as last reported.
	passwordErrs map[netip.Addr]string
	// badRouterID is the router ID annotation last reported unusable.
	badRouterID string
}

type segment struct {
	seg    *l2.Segment
	anns   []string
	cancel context.CancelFunc
	done   chan struct{}
}

// Setup adds the speaker to the agent's manager: a cache of every Node
// (the agent's own cache holds only its Node) and the speaker's loop.
func Setup(mgr manager.Manager, cfg Config, log logr.Logger) error {
	if !cfg.Options.Enabled {
		return nil
	}
	if err := cfg.Options.Validate(); err != nil {
		return err
	}
	nodes, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the speaker's Node cache: %w", err)
	}
	if err := mgr.Add(nodes); err != nil {
		return err
	}
	// The peers' passwords: Secrets of the agents' namespace only.
	secrets, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{cfg.Options.SecretNamespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return fmt.Errorf("creating the speaker's Secret cache: %w", err)
	}
	if err := mgr.Add(secrets); err != nil {
		return err
	}
	log = log.WithName("announce")
	s := &Speaker{
		cfg: cfg, reader: mgr.GetCache(), nodes: nodes, secrets: secrets, log: log, passwordErrs: map[netip.Addr]string{},
		report:   newReportWriter(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetCache(), mgr.GetEventRecorder("svcnet-agent"), cfg.Node, log),
		trigger:  make(chan struct{}, 1),
		ifaces:   &interfaces{netns: cfg.NetNS},
		segments: map[string]*segment{}, advertised: map[netip.Addr]bool{}, missing: map[string]bool{},
	}
	s.report.owns = s.owns
	s.report.livenessPort = cfg.Options.LivenessPort
	registerMetrics()
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return s.run(ctx, mgr.GetCache(), nodes) }))
}

// run watches, then syncs on every change and every resyncPeriod until
// ctx ends. Until the API server serves every kind it watches (the CRDs
// installed after the agent, or with it, as a chart does), it waits.
func (s *Speaker) run(ctx context.Context, agentCache, nodeCache cache.Cache) error {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	watches := []struct {
		c   cache.Cache
		obj client.Object
	}{
		{agentCache, &corev1.Service{}}, {agentCache, &discoveryv1.EndpointSlice{}},
		{agentCache, &svcnetv1alpha1.LoadBalancerIPPool{}}, {agentCache, &svcnetv1alpha1.LoadBalancerAnnouncement{}},
		{nodeCache, &corev1.Node{}},
	}
	for _, w := range watches {
		inf, err := s.informer(ctx, w.c, w.obj)
		if err != nil {
			return nil // ctx ended while waiting
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	if !agentCache.WaitForCacheSync(ctx) || !nodeCache.WaitForCacheSync(ctx) {
		return errors.New("the speaker's caches did not sync")
	}
	s.ifaceIPv4, _ = s.ifaces.firstIPv4()
	s.bgp = bgp.New(bgp.Config{NetNS: s.cfg.NetNS, Log: s.log.WithName("bgp"), OnBFDChange: observeBFDChange})
	go s.report.run(ctx)
	defer s.stopSegments()
	tick := time.NewTicker(resyncPeriod)
	defer tick.Stop()
	for {
		if err := s.sync(ctx); err != nil {
			s.log.Error(err, "Announcing failed, retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.trigger:
		case <-tick.C:
		}
	}
}

// kindPollInterval is how often the speaker asks again for a kind the
// API server does not serve yet.
var kindPollInterval = 2 * time.Second

// informer is c's informer of obj's kind, waiting while the API server
// does not serve it: the CRDs not installed yet (no match), or just
// created and not yet in discovery (an error of their group). A chart
// applies the CRDs and the DaemonSet together; an agent giving up then
// would be restarted, or announce nothing until it is. It fails only
// when ctx ends.
func (s *Speaker) informer(ctx context.Context, c cache.Cache, obj client.Object) (cache.Informer, error) {
	var inf cache.Informer
	logged := false
	err := wait.PollUntilContextCancel(ctx, kindPollInterval, true, func(ctx context.Context) (bool, error) {
		var err error
		if inf, err = c.GetInformer(ctx, obj); err == nil {
			if logged {
				s.log.Info("The API server serves the kind now: announcing", "kind", fmt.Sprintf("%T", obj))
			}
			return true, nil
		}
		if !logged {
			msg := "Waiting for the API server to serve a kind; LoadBalancer announcements start when it does"
			if apimeta.IsNoMatchError(err) {
				msg = "Waiting for the CRDs; LoadBalancer announcements start when they are installed"
			}
			s.log.Info(msg, "kind", fmt.Sprintf("%T", obj), "err", err.Error())
			logged = true
		}
		return false, nil
	})
	return inf, err
}

func (s *Speaker) poke() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// routerID is the node's BGP router ID (announcementpolicy.RouterID); an
// unusable annotation is reported once per value.
func (s *Speaker) routerID(node *corev1.Node) netip.Addr {
	id, err := announcementpolicy.RouterID(node, s.ifaceIPv4)
	bad := ""
	if err != nil {
		bad = node.Annotations[svcnetv1alpha1.AnnotationBGPRouterID]
	}
	if bad != s.badRouterID && bad != "" {
		s.log.Error(err, "Ignoring the node's BGP router ID annotation", "routerID", id)
		s.report.badRouterID(node, id, err)
	}
	s.badRouterID = bad
	return id
}

// sync plans and hands the plan to the segments and the BGP speaker.
func (s *Speaker) sync(ctx context.Context) error {
	w, err := s.read(ctx)
	if err != nil {
		return err
	}
	p := makePlan(w)
	s.mu.Lock()
	s.plan = p
	s.mu.Unlock()
	s.report.setPlan(p)
	l2Err := s.syncL2(ctx, p, w)
	bgpErr := s.syncBGP(ctx, p, findNode(w.nodes, w.node))
	s.updateMetrics(ctx)
	return errors.Join(l2Err, bgpErr)
}

// read takes the world from the caches: accepted announcements only.
func (s *Speaker) read(ctx context.Context) (world, error) {
	w := world{node: s.cfg.Node, serve: s.cfg.Options.Serve, slices: map[types.NamespacedName][]*discoveryv1.EndpointSlice{}}
	var nodes corev1.NodeList
	var anns svcnetv1alpha1.LoadBalancerAnnouncementList
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	for _, l := range []struct {
		r    client.Reader
		list client.ObjectList
	}{{s.nodes, &nodes}, {s.reader, &anns}, {s.reader, &pools}} {
		if err := l.r.List(ctx, l.list); err != nil {
			return w, err
		}
	}
	for i := range nodes.Items {
		w.nodes = append(w.nodes, &nodes.Items[i])
	}
	for i := range anns.Items {
		if anns.Items[i].Accepted() {
			if a, err := announcementpolicy.Compile(&anns.Items[i]); err == nil {
				w.announcements = append(w.announcements, a)
			}
		}
	}
	poolPtrs := make([]*svcnetv1alpha1.LoadBalancerIPPool, 0, len(pools.Items))
	for i := range pools.Items {
		poolPtrs = append(poolPtrs, &pools.Items[i])
	}
	w.pools = announcementpolicy.Pools(poolPtrs)
	if len(w.announcements) == 0 {
		return w, nil // nothing to announce: the Services are not read
	}
	var svcs corev1.ServiceList
	if err := s.reader.List(ctx, &svcs); err != nil {
		return w, err
	}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) == 0 {
			continue
		}
		w.services = append(w.services, svc)
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
			var sl discoveryv1.EndpointSliceList // the cache's copies, one list per Service
			if err := s.reader.List(ctx, &sl, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
				return w, err
			}
			key := client.ObjectKeyFromObject(svc)
			for j := range sl.Items {
				w.slices[key] = append(w.slices[key], &sl.Items[j])
			}
		}
	}
	return w, nil
}

// syncL2 runs a segment on every interface the plan names that exists,
// with its wants, and stops the others. A missing interface is reported
// and skipped: the node is then no candidate there, and nothing else
// changes.
func (s *Speaker) syncL2(ctx context.Context, p plan, w world) error {
	byIface := map[string][]string{}
	for name, anns := range p.l2Interfaces {
		iface := name
		if name == "" {
			var err error
			if iface, err = s.ifaces.ofInternalIP(findNode(w.nodes, w.node)); err != nil {
				s.reportMissing(ctx, anns, "(the InternalIP's)", err)
				continue
			}
		}
		if !s.ifaces.exists(iface) {
			s.reportMissing(ctx, anns, iface, errors.New("no such interface"))
			continue
		}
		byIface[iface] = append(byIface[iface], anns...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for iface, seg := range s.segments {
		if _, ok := byIface[iface]; !ok {
			seg.stop()
			delete(s.segments, iface)
		}
	}
	for iface, anns := range byIface {
		seg := s.segments[iface]
		if seg == nil {
			var err error
			if seg, err = s.startSegment(ctx, iface); err != nil {
				errs = append(errs, err)
				continue
			}
			s.segments[iface] = seg
		}
		seg.anns = anns
		seg.seg.SetWants(anns, p.segmentWants(anns), p.segmentPeers(anns))
	}
	return errors.Join(errs...)
}

func (s *Speaker) startSegment(ctx context.Context, iface string) (*segment, error) {
	seg, err := l2.Open(l2.Config{
		Node: s.cfg.Node, Interface: iface, NetNS: s.cfg.NetNS,
		Interval: s.cfg.Options.HeartbeatInterval, DeadAfter: s.cfg.Options.DeadAfter,
		Incarnation: rand.Uint64(), Log: s.log.WithName("l2"), OnChange: s.segmentChanged, OnHold: s.segmentHolds,
		LivenessPort: s.cfg.Options.LivenessPort,
	})
	if err != nil {
		return nil, err
	}
	segCtx, cancel := context.WithCancel(ctx)
	out := &segment{seg: seg, cancel: cancel, done: make(chan struct{})}
	go func() { seg.Run(segCtx); close(out.done) }()
	s.log.Info("Announcing on interface", "interface", iface)
	return out, nil
}

func (g *segment) stop() {
	g.cancel()
	<-g.done
}

func (s *Speaker) stopSegments() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for iface, seg := range s.segments {
		seg.stop()
		delete(s.segments, iface)
	}
}

// segmentChanged is told by a segment what it took and let go of.
func (s *Speaker) segmentChanged(iface string, taken []l2.Takeover, released []netip.Addr) {
	for _, t := range taken {
		metricTakeovers.Inc()
		observeFailover(t)
		kv := []any{"address", t.Addr, "interface", iface}
		if t.Moved() {
			kv = append(kv, "from", t.From, "reason", t.Reason, "unansweredFor", t.Gap)
		}
		s.log.Info("Announcing address", kv...)
		s.report.l2Changed(l2Change{addr: t.Addr, iface: iface, taken: true, at: t.At, from: t.From, reason: t.Reason, gap: t.Gap})
	}
	for _, a := range released {
		s.log.Info("Stopped announcing address", "address", a, "interface", iface)
		s.report.l2Changed(l2Change{addr: a, iface: iface})
	}
	s.poke() // refresh the metrics
}

// segmentHolds is told by a segment the addresses it holds back because
// it hears no peer while other candidates are Ready in the API.
func (s *Speaker) segmentHolds(iface string, held []netip.Addr) {
	if len(held) > 0 {
		s.log.Info("Hearing no peer on the segment while other candidates are Ready: holding back addresses another node should answer for; are the heartbeats filtered?",
			"interface", iface, "addresses", held, "livenessPort", s.cfg.Options.LivenessPort)
	} else {
		s.log.Info("No longer holding back addresses", "interface", iface)
	}
	s.report.heldBack(iface, held)
}

func (s *Speaker) reportMissing(ctx context.Context, anns []string, iface string, err error) {
	for _, a := range anns {
		key := a + "/" + iface
		metricInterfaceMissing.WithLabelValues(a, iface).Set(1)
		s.mu.Lock()
		seen := s.missing[key]
		s.missing[key] = true
		s.mu.Unlock()
		if !seen {
			s.log.Info("Interface not found, not announcing there", "announcement", a, "interface", iface, "err", err.Error())
			s.report.interfaceMissing(ctx, a, iface, err)
		}
	}
}

// syncBGP advertises the plan's addresses, each with its announcement's
// attributes, to its peers, leaving out those whose password is missing.
func (s *Speaker) syncBGP(ctx context.Context, p plan, self *corev1.Node) error {
	paths := make([]bgp.Path, 0, len(p.bgp))
	want := map[netip.Addr]bool{}
	for _, ap := range p.bgp {
		var peers []netip.Addr
		for _, peer := range ap.announcement.PeersOf(self) {
			peers = append(peers, peer.Address)
		}
		paths = append(paths, bgp.Path{Prefix: ap.announcement.RoutePrefix(ap.addr), Attributes: ap.announcement.Attributes, Peers: peers})
		want[ap.addr] = true
	}
	if err := s.bgp.Sync(ctx, s.routerID(self), s.withPasswords(ctx, p), paths); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ap := range p.bgp {
		if !s.advertised[ap.addr] {
			s.report.bgpChanged(ctx, ap, len(p.peers), true)
		}
	}
	for a := range s.advertised {
		if !want[a] {
			s.report.bgpChanged(ctx, addrPlan{addr: a, services: s.report.servicesOf(a)}, len(p.peers), false)
		}
	}
	s.advertised = want
	return nil
}

func (s *Speaker) updateMetrics(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	metricOwned.Reset()
	metricAddresses.Reset()
	metricPeers.Reset()
	metricHeldBack.Reset()
	for iface, seg := range s.segments {
		owned := seg.seg.Owned()
		metricAddresses.WithLabelValues("l2", iface).Set(float64(len(owned)))
		metricPeers.WithLabelValues(iface).Set(float64(seg.seg.Peers()))
		metricHeldBack.WithLabelValues(iface).Set(float64(len(seg.seg.HeldBack())))
		for _, a := range owned {
			metricOwned.WithLabelValues(a.String(), "l2").Set(1)
		}
	}
	metricAddresses.WithLabelValues("bgp", "").Set(float64(len(s.advertised)))
	for a := range s.advertised {
		metricOwned.WithLabelValues(a.String(), "bgp").Set(1)
	}
	planned := make([]netip.Addr, 0, len(s.plan.l2))
	for _, ap := range s.plan.l2 {
		planned = append(planned, ap.addr)
	}
	syncFailoverSeries(planned)
	metricSessionUp.Reset()
	for peer, up := range s.bgp.Sessions(ctx) {
		v := 0.0
		if up {
			v = 1
		}
		metricSessionUp.WithLabelValues(peer.String()).Set(v)
	}
	syncBFDSeries(s.bgp.BFDSessions())
}

// owns tells whether some segment answers for a.
func (s *Speaker) owns(a netip.Addr) bool {
	for _, addrs := range s.Owned() {
		if slices.Contains(addrs, a) {
			return true
		}
	}
	return false
}

// Owned lists what this node answers for in L2 mode, by interface.
func (s *Speaker) Owned() map[string][]netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]netip.Addr{}
	for iface, seg := range s.segments {
		out[iface] = slices.Clone(seg.seg.Owned())
	}
	return out
}

// withPasswords are the plan's peers with their passwords read from the
// Secrets; a peer whose Secret or key is missing is left out (and
// reported, once per cause) until it appears, and the others go on.
func (s *Speaker) withPasswords(ctx context.Context, p plan) []announcementpolicy.Peer {
	out := make([]announcementpolicy.Peer, 0, len(p.peers))
	failed := map[netip.Addr]bool{}
	read := map[netip.Addr]bool{}
	for _, peer := range p.peers {
		if peer.PasswordSecret != "" {
			pw, err := s.password(ctx, peer)
			if err != nil {
				failed[peer.Address] = true
				if s.passwordErrs[peer.Address] != err.Error() {
					s.passwordErrs[peer.Address] = err.Error()
					s.log.Error(err, "Leaving out a BGP peer until its password can be read", "peer", peer.Address, "announcement", p.peerAnnouncements[peer.Address])
					s.report.passwordMissing(ctx, p.peerAnnouncements[peer.Address], peer.Address, err)
				}
				continue
			}
			peer.Password = pw
			read[peer.Address] = true
		}
		out = append(out, peer)
	}
	for a := range s.passwordErrs {
		if !failed[a] {
			delete(s.passwordErrs, a)
			if read[a] {
				s.log.Info("Read the BGP peer's password", "peer", a)
			}
		}
	}
	return out
}

// secretSyncWait is how long the first sync that needs a password waits
// for the Secrets to be read before it reports the password unreadable;
// later syncs do not wait, so an agent without access to the Secrets
// does not slow every sync.
const secretSyncWait = 5 * time.Second

func (s *Speaker) secretsSynced(ctx context.Context) bool {
	if s.secretInformer.HasSynced() || s.secretsWaited {
		return s.secretInformer.HasSynced()
	}
	s.secretsWaited = true
	ctx, cancel := context.WithTimeout(ctx, secretSyncWait)
	defer cancel()
	return toolscache.WaitForCacheSync(ctx.Done(), s.secretInformer.HasSynced)
}

// password reads a peer's TCP-MD5 password from its Secret. The Secrets
// are watched from the first peer with a password on, so that an agent
// whose peers have none needs no access to them.
func (s *Speaker) password(ctx context.Context, peer announcementpolicy.Peer) (string, error) {
	ns := s.cfg.Options.SecretNamespace
	if s.secretInformer == nil {
		inf, err := s.secrets.GetInformer(ctx, &corev1.Secret{}, cache.BlockUntilSynced(false))
		if err != nil {
			return "", fmt.Errorf("watching the Secrets of namespace %s: %w", ns, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { s.poke() }, UpdateFunc: func(any, any) { s.poke() }, DeleteFunc: func(any) { s.poke() },
		}); err != nil {
			return "", err
		}
		s.secretInformer = inf
	}
	if !s.secretsSynced(ctx) {
		return "", fmt.Errorf("the Secrets of namespace %s are not read yet (the agent needs get, list and watch on secrets there)", ns)
	}
	var secret corev1.Secret
	if err := s.secrets.Get(ctx, client.ObjectKey{Namespace: ns, Name: peer.PasswordSecret}, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("the password's Secret %s/%s does not exist", ns, peer.PasswordSecret)
		}
		return "", fmt.Errorf("reading the password's Secret %s/%s: %w", ns, peer.PasswordSecret, err)
	}
	pw, ok := secret.Data[peer.PasswordKey]
	if !ok || len(pw) == 0 {
		return "", fmt.Errorf("the password's Secret %s/%s has no key %q", ns, peer.PasswordSecret, peer.PasswordKey)
	}
	return string(pw), nil
}
