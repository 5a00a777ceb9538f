// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// The Events the speaker records.
const (
	EventAnnounced         = "Announced"
	EventAdvertised        = "Advertised"
	EventWithdrawn         = "Withdrawn"
	EventInterfaceNotFound = "InterfaceNotFound"
	EventPasswordNotFound  = "BGPPasswordNotFound"
	EventBadRouterID       = "InvalidBGPRouterID"
	EventPeersUnheard      = "L2PeersUnheard"
	EventHoldBackEnded     = "L2HoldBackEnded"
)

// reportRetryInterval is how soon a report the API server refused is
// written again.
const reportRetryInterval = 2 * time.Second

// reportWriter writes what the segments report into this node's
// LoadBalancerNodeAnnouncement, off the segments' goroutines: the
// addresses the node answers for, and those it let go of with no node to
// take them over. The manager composes the Services' condition from every
// node's report; the agent needs no right on Services, and may write only
// its own node's report (a ValidatingAdmissionPolicy holds it to that).
// The node is the report's only writer, so what it holds in memory is the
// truth: its first write after a start clears what an earlier run left.
type reportWriter struct {
	client client.Client
	// api reads live: the report (the agent caches none), the Node for
	// the report's owner, the Services for Events.
	api client.Reader
	// services is the agent's cache of Services: a withdrawn address is
	// reported while one of its Services holds it.
	services client.Reader
	recorder events.EventRecorder
	node     string
	log      logr.Logger
	clock    clock.PassiveClock
	// owns tells whether this node still answers for an address: a
	// takeover report that a later change overtook is not written.
	owns func(netip.Addr) bool

	mu   sync.Mutex
	plan map[netip.Addr]addrPlan
	// left are the addresses this node answered for when they left its
	// plan (its announcement no longer selects it), kept until their
	// release is reported: no other node may be there to take them.
	left  map[netip.Addr]addrPlan
	queue []l2Change
	wake  chan struct{}
	// holding are the addresses the segments hold back (l2.Segment.HeldBack),
	// with the interface and since when; heldEvents the Events about it
	// to record.
	holding    map[netip.Addr]heldAddr
	heldEvents []heldEvent
	// livenessPort is the UDP path's port, for the Events' advice.
	livenessPort int

	// Only run's goroutine uses these.
	answered  map[netip.Addr]svcnetv1alpha1.L2AnsweredAddress
	withdrawn map[netip.Addr]svcnetv1alpha1.L2WithdrawnAddress
	// written is the spec last written; nil before the first write.
	written *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec
	// announced are the Announced Events to record once the report that
	// says so is written.
	announced []announcedEvent
}

type l2Change struct {
	addr  netip.Addr
	iface string
	taken bool
	// at is when the segment first announced a taken address.
	at time.Time
	// from, for a takeover that moved the address from another node, is
	// that node; reason why it stopped, gap how long the address may have
	// gone unanswered.
	from   string
	reason l2.MoveReason
	gap    time.Duration
}

type heldAddr struct {
	iface string
	since time.Time
}

// heldEvent is a segment starting (addrs) or ceasing to hold back.
type heldEvent struct {
	iface string
	addrs []netip.Addr
}

type announcedEvent struct {
	services []svcnetv1alpha1.ServiceReference
	message  string
}

func newReportWriter(c client.Client, api, services client.Reader, rec events.EventRecorder, node string, log logr.Logger) *reportWriter {
	return &reportWriter{client: c, api: api, services: services, recorder: rec, node: node, log: log, clock: clock.RealClock{},
		plan: map[netip.Addr]addrPlan{}, left: map[netip.Addr]addrPlan{}, wake: make(chan struct{}, 1), holding: map[netip.Addr]heldAddr{},
		answered: map[netip.Addr]svcnetv1alpha1.L2AnsweredAddress{}, withdrawn: map[netip.Addr]svcnetv1alpha1.L2WithdrawnAddress{}}
}

// setPlan takes a new plan, before the segments apply it (so that this
// node still owns what it is about to let go of).
func (w *reportWriter) setPlan(p plan) {
	m := make(map[netip.Addr]addrPlan, len(p.l2))
	for _, ap := range p.l2 {
		m[ap.addr] = ap
	}
	w.mu.Lock()
	old := w.plan
	w.mu.Unlock()
	var left []addrPlan
	for a, ap := range old {
		if _, still := m[a]; !still && w.owns != nil && w.owns(a) {
			left = append(left, ap)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.plan = m
	for a := range m {
		delete(w.left, a)
	}
	for _, ap := range left {
		w.left[ap.addr] = ap
	}
}

func (w *reportWriter) servicesOf(a netip.Addr) []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plan[a].services
}

// l2Changed queues a segment's report; it never blocks.
func (w *reportWriter) l2Changed(c l2Change) {
	w.mu.Lock()
	w.queue = append(w.queue, c)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// heldBack takes what a segment holds back now (all of it on iface; none
// when addrs is empty); it never blocks. An Event is recorded on the Node
// when the segment starts holding back and when it stops.
func (w *reportWriter) heldBack(iface string, addrs []netip.Addr) {
	now := w.clock.Now()
	w.mu.Lock()
	was := false
	for a, h := range w.holding {
		if h.iface == iface {
			was = true
			if !slices.Contains(addrs, a) {
				delete(w.holding, a)
			}
		}
	}
	for _, a := range addrs {
		if _, ok := w.holding[a]; !ok {
			w.holding[a] = heldAddr{iface: iface, since: now}
		}
	}
	if was != (len(addrs) > 0) {
		w.heldEvents = append(w.heldEvents, heldEvent{iface: iface, addrs: slices.Clone(addrs)})
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run applies the queued changes and writes the report, at once when it
// starts (to clear an earlier run's), and again after a failure.
func (w *reportWriter) run(ctx context.Context) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-retry.C:
		}
		w.mu.Lock()
		queue := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, c := range queue {
			w.apply(c)
		}
		if err := w.flush(ctx); err != nil {
			w.log.Error(err, "Writing the node's announcement report, retrying", "node", w.node)
			retry.Reset(reportRetryInterval)
			continue
		}
		w.recordAnnounced(ctx)
		w.recordHeld(ctx)
	}
}

// apply records one change in the report to write.
func (w *reportWriter) apply(c l2Change) {
	w.mu.Lock()
	ap, planned := w.plan[c.addr]
	if gone, ok := w.left[c.addr]; !planned && ok && !c.taken {
		// Its announcement no longer selects this node: its letting go
		// is reported; a node that takes it over reports later.
		ap = gone
		delete(w.left, c.addr)
	}
	w.mu.Unlock()
	refs := serviceRefs(ap.services)
	if c.taken {
		if (w.owns != nil && !w.owns(c.addr)) || len(refs) == 0 {
			return
		}
		since := c.at
		if since.IsZero() {
			since = w.clock.Now()
		}
		entry := svcnetv1alpha1.L2AnsweredAddress{
			Address: c.addr.String(), Interface: c.iface, Protocol: announcementpolicy.L2ProtocolOf(c.addr),
			Services: refs, Since: metav1.NewMicroTime(since.Truncate(time.Microsecond)), Takeover: takeoverOf(c),
		}
		w.answered[c.addr] = entry
		delete(w.withdrawn, c.addr)
		w.announced = append(w.announced, announcedEvent{services: refs,
			message: announcedMessage(announcementpolicy.AnsweredPart(entry.Address, w.node, entry.Protocol, entry.Interface), c)})
		return
	}
	had, answering := w.answered[c.addr]
	if !answering || had.Interface != c.iface {
		return
	}
	delete(w.answered, c.addr)
	// Letting go while another node may take it: that node reports it,
	// and the manager names this node until then.
	if (planned && len(ap.candidates) > 0) || len(refs) == 0 {
		return
	}
	w.withdrawn[c.addr] = svcnetv1alpha1.L2WithdrawnAddress{Address: c.addr.String(), Services: refs, Since: metav1.NewMicroTime(w.clock.Now().Truncate(time.Microsecond))}
}

func takeoverOf(c l2Change) *svcnetv1alpha1.L2Takeover {
	var reason svcnetv1alpha1.TakeoverReason
	switch c.reason {
	case l2.MovedPeerLost:
		reason = svcnetv1alpha1.TakeoverReasonPeerLost
	case l2.MovedReleased:
		reason = svcnetv1alpha1.TakeoverReasonReleased
	default:
		return nil
	}
	if c.from == "" {
		return nil
	}
	return &svcnetv1alpha1.L2Takeover{FromNode: c.from, Reason: reason, UnansweredFor: metav1.Duration{Duration: roundUpMillisecond(c.gap)}}
}

func serviceRefs(keys []types.NamespacedName) []svcnetv1alpha1.ServiceReference {
	out := make([]svcnetv1alpha1.ServiceReference, 0, len(keys))
	for _, k := range keys {
		out = append(out, svcnetv1alpha1.ServiceReference{Namespace: k.Namespace, Name: k.Name})
	}
	return out
}

// spec is the report to write: withdrawn addresses that none of their
// Services holds any more are dropped.
func (w *reportWriter) spec(ctx context.Context) (svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec, error) {
	for a, wd := range w.withdrawn {
		held, err := w.held(ctx, a, wd.Services)
		if err != nil {
			return svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{}, err
		}
		if !held {
			delete(w.withdrawn, a)
		}
	}
	var spec svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec
	for _, a := range w.answered {
		spec.Addresses = append(spec.Addresses, a)
	}
	for _, a := range w.withdrawn {
		spec.Withdrawn = append(spec.Withdrawn, a)
	}
	spec.HeldBack = w.heldSpec()
	slices.SortFunc(spec.Addresses, func(a, b svcnetv1alpha1.L2AnsweredAddress) int { return cmp.Compare(a.Address, b.Address) })
	slices.SortFunc(spec.Withdrawn, func(a, b svcnetv1alpha1.L2WithdrawnAddress) int { return cmp.Compare(a.Address, b.Address) })
	return spec, nil
}

// heldSpec are the report's held-back addresses, with their Services as
// the plan has them now, sorted.
func (w *reportWriter) heldSpec() []svcnetv1alpha1.L2HeldBackAddress {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []svcnetv1alpha1.L2HeldBackAddress
	for a, h := range w.holding {
		refs := serviceRefs(w.plan[a].services)
		if len(refs) == 0 {
			continue
		}
		out = append(out, svcnetv1alpha1.L2HeldBackAddress{Address: a.String(), Interface: h.iface, Services: refs,
			Since: metav1.NewMicroTime(h.since.Truncate(time.Microsecond))})
	}
	slices.SortFunc(out, func(a, b svcnetv1alpha1.L2HeldBackAddress) int { return cmp.Compare(a.Address, b.Address) })
	return out
}

// recordHeld records on the Node that a segment started or stopped
// holding back addresses.
func (w *reportWriter) recordHeld(ctx context.Context) {
	w.mu.Lock()
	pending := w.heldEvents
	w.heldEvents = nil
	w.mu.Unlock()
	if w.recorder == nil || len(pending) == 0 {
		return
	}
	var node corev1.Node
	if err := w.api.Get(ctx, client.ObjectKey{Name: w.node}, &node); err != nil {
		return
	}
	for _, e := range pending {
		if len(e.addrs) == 0 {
			w.recorder.Eventf(&node, nil, corev1.EventTypeNormal, EventHoldBackEnded, "Announce",
				"node %s holds back no address on %s any more: it hears an L2 peer, no other candidate is Ready, or it is not answering there at all", w.node, e.iface)
			continue
		}
		w.recorder.Eventf(&node, nil, corev1.EventTypeWarning, EventPeersUnheard, "Announce", "%s", peersUnheardMessage(w.node, e, w.livenessPort))
	}
}

// peersUnheardMessage says what a node holding back addresses does and
// what to check.
func peersUnheardMessage(node string, e heldEvent, port int) string {
	path := "the UDP path is off (--announce-liveness-port=0)"
	if port != 0 {
		path = fmt.Sprintf("nor by UDP to port %d", port)
	}
	addrs := make([]string, 0, len(e.addrs))
	for _, a := range e.addrs {
		addrs = append(addrs, a.String())
	}
	return fmt.Sprintf("node %s hears no L2 peer on %s, neither by heartbeat frames (EtherType 0x88B5) %s, while other candidates are Ready: "+
		"it does not answer for %s and leaves them to the first Ready candidate; let the heartbeats pass between the nodes",
		node, e.iface, path, strings.Join(addrs, ", "))
}

// held tells whether one of the Services a withdrawal names still holds
// the address (the manager reads a withdrawal for those alone): a look at
// each of them in the cache, not a list of every Service.
func (w *reportWriter) held(ctx context.Context, a netip.Addr, refs []svcnetv1alpha1.ServiceReference) (bool, error) {
	for _, ref := range refs {
		var svc corev1.Service
		switch err := w.services.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &svc, client.UnsafeDisableDeepCopy); {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return false, fmt.Errorf("reading Service %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil && ip == a {
				return true, nil
			}
		}
	}
	return false, nil
}

// flush writes the report if it changed since the last write.
func (w *reportWriter) flush(ctx context.Context) error {
	spec, err := w.spec(ctx)
	if err != nil {
		return err
	}
	if w.written != nil && equality.Semantic.DeepEqual(*w.written, spec) {
		return nil
	}
	report := &svcnetv1alpha1.LoadBalancerNodeAnnouncement{}
	err = w.api.Get(ctx, client.ObjectKey{Name: w.node}, report)
	switch {
	case apierrors.IsNotFound(err):
		if len(spec.Addresses) == 0 && len(spec.Withdrawn) == 0 && len(spec.HeldBack) == 0 {
			break // nothing to say, nothing said before
		}
		report = &svcnetv1alpha1.LoadBalancerNodeAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: w.node}, Spec: spec}
		w.ownByNode(ctx, report)
		if err := w.client.Create(ctx, report); err != nil {
			return fmt.Errorf("creating LoadBalancerNodeAnnouncement %s: %w", w.node, err)
		}
	case err != nil:
		return fmt.Errorf("reading LoadBalancerNodeAnnouncement %s: %w", w.node, err)
	default:
		if !equality.Semantic.DeepEqual(report.Spec, spec) || len(report.OwnerReferences) == 0 {
			report.Spec = spec
			w.ownByNode(ctx, report)
			if err := w.client.Update(ctx, report); err != nil {
				return fmt.Errorf("updating LoadBalancerNodeAnnouncement %s: %w", w.node, err)
			}
		}
	}
	w.written = &spec
	return nil
}

// ownByNode makes the Node the report's owner, so that the report goes
// with it (the garbage collector deletes it; the agent may not delete
// reports at all). A Node that is gone, or cannot be read now, is set as
// owner at a later write.
func (w *reportWriter) ownByNode(ctx context.Context, report *svcnetv1alpha1.LoadBalancerNodeAnnouncement) {
	if len(report.OwnerReferences) > 0 {
		return
	}
	var node corev1.Node
	if err := w.api.Get(ctx, client.ObjectKey{Name: w.node}, &node); err != nil {
		return
	}
	report.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
}

// recordAnnounced records the Announced Events of the takeovers just
// reported, on each of their Services.
func (w *reportWriter) recordAnnounced(ctx context.Context) {
	pending := w.announced
	w.announced = nil
	if w.recorder == nil {
		return
	}
	for _, e := range pending {
		for _, ref := range e.services {
			var svc corev1.Service
			if err := w.api.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &svc); err != nil {
				continue
			}
			w.recorder.Eventf(&svc, nil, corev1.EventTypeNormal, EventAnnounced, "Announce", "%s", e.message)
		}
	}
}

// roundUpMillisecond rounds a gap up to the millisecond: it is an upper
// bound.
func roundUpMillisecond(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// announcedMessage is the Announced Event's message: the condition's part
// and, when the address moved from another node, from which, why, and how
// long it may have gone unanswered.
func announcedMessage(part string, c l2Change) string {
	var why string
	switch c.reason {
	case l2.MovedPeerLost:
		why = "whose heartbeats stopped"
	case l2.MovedReleased:
		why = "which let go of it"
	default:
		return part
	}
	return fmt.Sprintf("%s, taken over from %s, %s: unanswered for at most %s", part, c.from, why, roundUpMillisecond(c.gap))
}

// bgpChanged records that this node started or stopped advertising an
// address, on each of its Services.
func (w *reportWriter) bgpChanged(ctx context.Context, ap addrPlan, peers int, advertised bool) {
	for _, key := range ap.services {
		var svc corev1.Service
		if err := w.api.Get(ctx, key, &svc); err != nil {
			continue
		}
		if advertised {
			w.recorder.Eventf(&svc, nil, corev1.EventTypeNormal, EventAdvertised, "Advertise", "%s advertised by BGP from %s to %d peer(s)", ap.addr, w.node, peers)
		} else {
			w.recorder.Eventf(&svc, nil, corev1.EventTypeNormal, EventWithdrawn, "Withdraw", "%s withdrawn by %s", ap.addr, w.node)
		}
	}
}

// interfaceMissing records on the announcement that this node cannot
// announce on an interface.
func (w *reportWriter) interfaceMissing(ctx context.Context, ann, iface string, err error) {
	var a svcnetv1alpha1.LoadBalancerAnnouncement
	if w.api.Get(ctx, client.ObjectKey{Name: ann}, &a) != nil {
		return
	}
	w.recorder.Eventf(&a, nil, corev1.EventTypeWarning, EventInterfaceNotFound, "Announce",
		"node %s has no interface %s (%v): it does not announce there; the other nodes do", w.node, iface, err)
}

// passwordMissing records on the announcement that this node leaves a
// peer out for want of its password.
func (w *reportWriter) passwordMissing(ctx context.Context, ann string, peer netip.Addr, err error) {
	var a svcnetv1alpha1.LoadBalancerAnnouncement
	if w.api.Get(ctx, client.ObjectKey{Name: ann}, &a) != nil {
		return
	}
	w.recorder.Eventf(&a, nil, corev1.EventTypeWarning, EventPasswordNotFound, "Announce",
		"node %s does not peer with %s: %v; it will once the Secret has the key; its other peers are unaffected", w.node, peer, err)
}

// badRouterID records on the node that its router ID annotation is
// unusable.
func (w *reportWriter) badRouterID(node *corev1.Node, used netip.Addr, err error) {
	w.recorder.Eventf(node, nil, corev1.EventTypeWarning, EventBadRouterID, "Announce",
		"%v; BGP uses router ID %s instead", err, used)
}
