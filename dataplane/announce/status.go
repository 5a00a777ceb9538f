// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
)

// The reasons of the Service condition the L2 owner of an address writes
// (svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced), and the Events
// the speaker records.
const (
	ReasonL2          = "L2"
	ReasonNoCandidate = "NoCandidate"

	EventAnnounced         = "Announced"
	EventAdvertised        = "Advertised"
	EventWithdrawn         = "Withdrawn"
	EventInterfaceNotFound = "InterfaceNotFound"
)

// statusWriter writes what the segments report into the Services, off
// the segments' goroutines: one condition per Service, whose message has a
// part per address ("192.168.240.1 answered by node-2 (ARP on eth0)"),
// each written by that address's owner with a resourceVersion guard, so a
// node letting go never overwrites the new owner's part.
type statusWriter struct {
	client   client.Client
	api      client.Reader
	recorder events.EventRecorder
	node     string
	log      logr.Logger
	// owns tells whether this node still answers for an address: a
	// takeover report that a later change overtook is not written.
	owns func(netip.Addr) bool

	mu   sync.Mutex
	plan map[netip.Addr]addrPlan
	// left are the addresses this node answered for when they left its
	// plan (its announcement no longer selects it), kept until their
	// release is written: no other node may be there to write it.
	left  map[netip.Addr]addrPlan
	queue []l2Change
	wake  chan struct{}
}

type l2Change struct {
	addr  netip.Addr
	iface string
	taken bool
	// from, for a takeover that moved the address from another node, is
	// that node; reason why it stopped, gap how long the address may have
	// gone unanswered.
	from   string
	reason l2.MoveReason
	gap    time.Duration
}

func newStatusWriter(c client.Client, api client.Reader, rec events.EventRecorder, node string, log logr.Logger) *statusWriter {
	return &statusWriter{client: c, api: api, recorder: rec, node: node, log: log, plan: map[netip.Addr]addrPlan{}, left: map[netip.Addr]addrPlan{}, wake: make(chan struct{}, 1)}
}

// setPlan takes a new plan, before the segments apply it (so that this
// node still owns what it is about to let go of).
func (w *statusWriter) setPlan(p plan) {
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

func (w *statusWriter) servicesOf(a netip.Addr) []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.plan[a].services
}

// l2Changed queues a segment's report; it never blocks.
func (w *statusWriter) l2Changed(c l2Change) {
	w.mu.Lock()
	w.queue = append(w.queue, c)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *statusWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.mu.Lock()
		queue := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, c := range queue {
			w.write(ctx, c)
		}
	}
}

func (w *statusWriter) write(ctx context.Context, c l2Change) {
	w.mu.Lock()
	ap, planned := w.plan[c.addr]
	if gone, ok := w.left[c.addr]; !planned && ok && !c.taken {
		// Its announcement no longer selects this node: say it is let
		// go of; a node that takes it over writes after.
		ap = gone
		delete(w.left, c.addr)
	}
	w.mu.Unlock()
	// Letting go while another node may take it: that node writes.
	if !c.taken && planned && len(ap.candidates) > 0 {
		return
	}
	if c.taken && w.owns != nil && !w.owns(c.addr) {
		return
	}
	for _, key := range ap.services {
		for range 5 {
			err := w.writeOne(ctx, key, c)
			if err == nil || !apierrors.IsConflict(err) {
				if err != nil && !apierrors.IsNotFound(err) {
					w.log.Error(err, "Writing the announcement condition", "service", key)
				}
				break
			}
		}
	}
}

func proto(a netip.Addr) string {
	if a.Is4() {
		return "ARP"
	}
	return "NDP"
}

// writeOne updates one Service's condition for the change.
func (w *statusWriter) writeOne(ctx context.Context, key types.NamespacedName, c l2Change) error {
	var svc corev1.Service
	if err := w.api.Get(ctx, key, &svc); err != nil {
		return err
	}
	parts := messageParts(apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced))
	mine := fmt.Sprintf("%s answered by %s (%s on %s)", c.addr, w.node, proto(c.addr), c.iface)
	switch {
	case c.taken:
		parts[c.addr.String()] = mine
	case strings.HasPrefix(parts[c.addr.String()], fmt.Sprintf("%s answered by %s ", c.addr, w.node)):
		delete(parts, c.addr.String())
	default:
		return nil
	}
	cond := metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Reason: ReasonL2, ObservedGeneration: svc.Generation}
	if len(parts) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonNoCandidate
		cond.Message = fmt.Sprintf("no node may announce %s (none selected, or none with a ready endpoint under externalTrafficPolicy Local)", c.addr)
	} else {
		cond.Message = strings.Join(slices.Sorted(maps.Values(parts)), "; ")
	}
	if !apimeta.SetStatusCondition(&svc.Status.Conditions, cond) {
		return nil
	}
	if err := w.client.Status().Update(ctx, &svc); err != nil {
		return err
	}
	if c.taken {
		w.recorder.Eventf(&svc, nil, corev1.EventTypeNormal, EventAnnounced, "Announce", "%s", announcedMessage(mine, c))
	}
	return nil
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
	// Rounded up: the gap is an upper bound.
	gap := (c.gap + time.Millisecond - 1).Truncate(time.Millisecond)
	return fmt.Sprintf("%s, taken over from %s, %s: unanswered for at most %s", part, c.from, why, gap)
}

// messageParts splits the condition's message into its parts by address.
func messageParts(c *metav1.Condition) map[string]string {
	out := map[string]string{}
	if c == nil || c.Status != metav1.ConditionTrue {
		return out
	}
	for _, p := range strings.Split(c.Message, "; ") {
		if addr, _, ok := strings.Cut(p, " "); ok {
			out[addr] = p
		}
	}
	return out
}

// bgpChanged records that this node started or stopped advertising an
// address, on each of its Services.
func (w *statusWriter) bgpChanged(ctx context.Context, ap addrPlan, peers int, advertised bool) {
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
func (w *statusWriter) interfaceMissing(ctx context.Context, ann, iface string, err error) {
	var a svcnetv1alpha1.LoadBalancerAnnouncement
	if w.api.Get(ctx, client.ObjectKey{Name: ann}, &a) != nil {
		return
	}
	w.recorder.Eventf(&a, nil, corev1.EventTypeWarning, EventInterfaceNotFound, "Announce",
		"node %s has no interface %s (%v): it does not announce there; the other nodes do", w.node, iface, err)
}
