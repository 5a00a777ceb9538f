// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// +kubebuilder:rbac:groups=networking.svcnet.io,resources=loadbalancernodeannouncements,verbs=get;list;watch

// AnnouncedControllerName names the controller that writes the
// svcnet.io/LoadBalancerAnnounced condition (part of the loadbalancer
// controller, not a --controllers name of its own).
const AnnouncedControllerName = ControllerName + "-announced"

// reportServicesIndex indexes the LoadBalancerNodeAnnouncements by the
// Services (namespace/name) their addresses are announced for.
const reportServicesIndex = "svcnet.io/lbnodeann-services"

// reportServices are the Services a node's report names, answered or
// withdrawn.
func reportServices(obj client.Object) []string {
	r := obj.(*svcnetv1alpha1.LoadBalancerNodeAnnouncement)
	seen := map[string]bool{}
	var out []string
	add := func(refs []svcnetv1alpha1.ServiceReference) {
		for _, ref := range refs {
			k := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}.String()
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	for _, a := range r.Spec.Addresses {
		add(a.Services)
	}
	for _, w := range r.Spec.Withdrawn {
		add(w.Services)
	}
	for _, h := range r.Spec.HeldBack {
		add(h.Services)
	}
	return out
}

// announcedReconciler writes a LoadBalancer Service's
// svcnet.io/LoadBalancerAnnounced condition from the nodes'
// LoadBalancerNodeAnnouncements: the agents report into their own node's
// object and hold no right on Services.
type announcedReconciler struct {
	client client.Client
}

var _ reconcile.Reconciler = (*announcedReconciler)(nil)

func (r *announcedReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var svc corev1.Service
	if err := r.client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	var reports svcnetv1alpha1.LoadBalancerNodeAnnouncementList
	if err := r.client.List(ctx, &reports, client.MatchingFields{reportServicesIndex: req.String()}); err != nil {
		return ctrl.Result{}, err
	}
	cond, ok := announcedCondition(&svc, reports.Items)
	if !ok || !apimeta.SetStatusCondition(&svc.Status.Conditions, cond) {
		return ctrl.Result{}, nil
	}
	if err := r.client.Status().Update(ctx, &svc); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the %s condition of Service %s: %w", svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, req, err)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Updated the announcement condition", "service", klog.KObj(&svc), "status", cond.Status, "message", cond.Message)
	return ctrl.Result{}, nil
}

// setupAnnouncedController watches LoadBalancer Services and the nodes'
// reports, each report mapped to the Services it names (before and after
// a change, so that a Service a node no longer names is looked at too).
func setupAnnouncedController(mgr ctrl.Manager, r *announcedReconciler) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &svcnetv1alpha1.LoadBalancerNodeAnnouncement{}, reportServicesIndex, reportServices); err != nil {
		return err
	}
	loadBalancers := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return obj.(*corev1.Service).Spec.Type == corev1.ServiceTypeLoadBalancer
	})
	named := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, k := range reportServices(obj) {
			ns, name, _ := strings.Cut(k, "/")
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(AnnouncedControllerName).
		For(&corev1.Service{}, builder.WithPredicates(loadBalancers)).
		Watches(&svcnetv1alpha1.LoadBalancerNodeAnnouncement{}, named).
		Complete(r)
}

// addrRecord is the latest any node says of one address of a Service.
type addrRecord struct {
	since time.Time
	node  string
	// from is the node an answer took the address over from.
	from string
	// part is the condition's part when the node answers for the
	// address; empty when it withdrew it.
	part string
}

// newer orders records: an answer taken over from a node before that
// node's withdrawal; else the later one; at the same time the answer
// that took the address over from the other node, an answer before a
// withdrawal, then by node name, so every reconcile picks the same.
func (a addrRecord) newer(b addrRecord) bool {
	// A node answering for an address it took over from another
	// supersedes that node's withdrawal of it, whatever their clocks say:
	// the node that lost its Node (or its selection) writes its letting go
	// when its report writer gets to it, which may be after the takeover.
	if a.part != "" && b.part == "" && a.from == b.node {
		return true
	}
	if b.part != "" && a.part == "" && b.from == a.node {
		return false
	}
	if c := a.since.Compare(b.since); c != 0 {
		return c > 0
	}
	if a.from != b.from && (a.from == b.node || b.from == a.node) {
		return a.from == b.node
	}
	if (a.part != "") != (b.part != "") {
		return a.part != ""
	}
	return cmp.Less(a.node, b.node)
}

// announcedCondition composes svc's svcnet.io/LoadBalancerAnnounced
// condition from the nodes' reports. Pure.
//
// For each of the Service's addresses the latest report wins: a node
// that took an address over from a dead one reports it later than the
// dead node's stale entry (the nodes' clocks are assumed roughly in
// step). An address no node reports anything about (handed over from one
// node to the next, or its agents restarting) keeps its part of the
// current condition: the last node known to answer stays named until
// another one says it answers, as when each owner wrote its own part.
// Parts of addresses the Service no longer holds are dropped. ok is false
// when nothing is to be written: no node ever reported on the Service's
// addresses.
func announcedCondition(svc *corev1.Service, reports []svcnetv1alpha1.LoadBalancerNodeAnnouncement) (metav1.Condition, bool) {
	held := map[string]bool{}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			held[a.String()] = true
		}
	}
	latest := map[string]addrRecord{}
	consider := func(addr string, refs []svcnetv1alpha1.ServiceReference, rec addrRecord) {
		a, err := netip.ParseAddr(addr)
		if err != nil || !held[a.String()] || !namesService(refs, svc) {
			return
		}
		if have, ok := latest[a.String()]; !ok || rec.newer(have) {
			latest[a.String()] = rec
		}
	}
	for i := range reports {
		node := reports[i].Name
		for _, a := range reports[i].Spec.Addresses {
			rec := addrRecord{since: a.Since.Time, node: node, part: announcementpolicy.AnsweredPart(a.Address, node, a.Protocol, a.Interface)}
			if a.Takeover != nil {
				rec.from = a.Takeover.FromNode
			}
			consider(a.Address, a.Services, rec)
		}
		for _, w := range reports[i].Spec.Withdrawn {
			consider(w.Address, w.Services, addrRecord{since: w.Since.Time, node: node})
		}
	}

	heldBy := heldBack(svc, held, reports)

	parts := map[string]string{}
	for addr, p := range messageParts(apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)) {
		if held[addr] {
			parts[addr] = p
		}
	}
	var withdrawn string
	var withdrawnAt time.Time
	for addr, rec := range latest {
		if rec.part != "" {
			parts[addr] = rec.part
			continue
		}
		delete(parts, addr)
		if withdrawn == "" || rec.since.After(withdrawnAt) || rec.since.Equal(withdrawnAt) && addr < withdrawn {
			withdrawn, withdrawnAt = addr, rec.since
		}
	}
	cond := metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, ObservedGeneration: svc.Generation}
	switch {
	case len(parts) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, svcnetv1alpha1.ServiceReasonL2
		cond.Message = strings.Join(append(slices.Sorted(maps.Values(parts)), heldBackNotes(heldBy)...), "; ")
	case len(heldBy) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, svcnetv1alpha1.ServiceReasonPeersUnheard
		cond.Message = strings.Join(heldBackNotes(heldBy), "; ")
	case withdrawn != "":
		cond.Status, cond.Reason = metav1.ConditionFalse, svcnetv1alpha1.ServiceReasonNoCandidate
		cond.Message = announcementpolicy.NoCandidateMessage(withdrawn)
	default:
		return cond, false
	}
	return cond, true
}

// heldBack are, by address the Service holds, the nodes that report it
// held back (they hear no L2 peer while other candidates are Ready).
func heldBack(svc *corev1.Service, held map[string]bool, reports []svcnetv1alpha1.LoadBalancerNodeAnnouncement) map[string][]string {
	out := map[string][]string{}
	for i := range reports {
		for _, h := range reports[i].Spec.HeldBack {
			a, err := netip.ParseAddr(h.Address)
			if err != nil || !held[a.String()] || !namesService(h.Services, svc) {
				continue
			}
			out[a.String()] = append(out[a.String()], fmt.Sprintf("%s (on %s)", reports[i].Name, h.Interface))
		}
	}
	return out
}

// heldBackNotes are the condition's notes of the held-back addresses,
// sorted. They begin with no address, so that messageParts never takes
// one for an answered address's part.
func heldBackNotes(heldBy map[string][]string) []string {
	out := make([]string, 0, len(heldBy))
	for addr, nodes := range heldBy {
		slices.Sort(nodes)
		out = append(out, fmt.Sprintf("held back from %s by %s: hearing no L2 peer while other candidates are Ready; are the heartbeats filtered?",
			addr, strings.Join(nodes, ", ")))
	}
	slices.Sort(out)
	return out
}

func namesService(refs []svcnetv1alpha1.ServiceReference, svc *corev1.Service) bool {
	return slices.ContainsFunc(refs, func(r svcnetv1alpha1.ServiceReference) bool {
		return r.Namespace == svc.Namespace && r.Name == svc.Name
	})
}

// messageParts splits a True condition's message into its parts by
// address.
func messageParts(c *metav1.Condition) map[string]string {
	out := map[string]string{}
	if c == nil || c.Status != metav1.ConditionTrue {
		return out
	}
	for _, p := range strings.Split(c.Message, "; ") {
		if addr, _, ok := strings.Cut(p, " "); ok {
			if a, err := netip.ParseAddr(addr); err == nil {
				out[a.String()] = p
			}
		}
	}
	return out
}
