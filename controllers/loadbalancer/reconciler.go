// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svcnet-io/svcnet/internal/lbclass"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/auditevents"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// ControllerName is the --controllers name.
const ControllerName = "loadbalancer"

// ReportingController is the reportingController of its Events.
const ReportingController = "svcnet-" + ControllerName

const (
	// ManagedBy is the IPAddress label value of the addresses svcnet gives
	// to LoadBalancer Services.
	ManagedBy = "ipallocator.svcnet.io"
	// DefaultClass is the spec.loadBalancerClass svcnet serves, besides
	// Services without a class.
	DefaultClass = lbclass.Default
	// AnnotationIPs requests specific addresses (comma separated, at most
	// one per family).
	AnnotationIPs = "svcnet.io/load-balancer-ips"
	// AnnotationSharingKey lets Services with the same key share one
	// address when their ports do not conflict.
	AnnotationSharingKey = "svcnet.io/sharing-key"
	// LabelPool names, on an IPAddress, the pool its address came from.
	LabelPool = "svcnet.io/load-balancer-ip-pool"
	// AnnotationPool names, on a Service, the one pool its new addresses
	// must come from. It is the key LabelPool puts on the IPAddress: on
	// either object it names the pool of the Service's address.
	AnnotationPool = LabelPool
)

// The kinds its repairs are reported under.
const (
	repairKindIPAddress = "IPAddress"
	repairKindStatus    = "Service status.loadBalancer"
	repairKindPool      = "LoadBalancerIPPool status"
)

// Event reasons.
const (
	ReasonAllocated        = "IPAllocated"
	ReasonReleased         = "IPReleased"
	ReasonAllocationFailed = "AllocationFailed"
	ReasonInvalidRequest   = "InvalidLoadBalancerIPs"
	ReasonSharingConflict  = "SharingConflict"
	ReasonNotInPool        = "IPNotInPool"
	// ReasonPoolUnavailable: the pool a Service names does not exist,
	// is not Ready or does not take the Service.
	ReasonPoolUnavailable = "PoolUnavailable"
	// ReasonConflictingRequests: two of a Service's annotations or
	// fields ask for different things (svcnet's annotation wins, then
	// MetalLB's, then spec.loadBalancerIP).
	ReasonConflictingRequests = "ConflictingLoadBalancerRequests"
	// ReasonMetalLBAnnotationHonoured (Normal): a MetalLB annotation
	// decided what the Service got.
	ReasonMetalLBAnnotationHonoured = "MetalLBAnnotationHonoured"
	// ReasonLoadBalancerIPHonoured (Normal): spec.loadBalancerIP decided
	// what the Service got.
	ReasonLoadBalancerIPHonoured = "LoadBalancerIPHonoured"
	// ReasonAdopted (Normal): the Service keeps an address another
	// controller gave it (its status shows it, with no IPAddress), such
	// as MetalLB's before the move to svcnet.
	ReasonAdopted = "IPAdopted"

	action = "LoadBalancerIPAllocation"
)

// Field indexes.
const (
	parentIndex  = "svcnet.io/lb-parent"     // IPAddress (ours): namespace/name of the Service
	ingressIndex = "svcnet.io/lb-ingress"    // Service: status.loadBalancer.ingress IPs
	sharingIndex = "svcnet.io/lb-sharingkey" // Service: the sharing key
)

// Options configure the controller.
type Options struct {
	// Serve is which LoadBalancer Services it serves, by class.
	Serve lbclass.Selection
	// LeakGracePeriod: an IPAddress of svcnet's whose Service is gone is
	// deleted once it is this old.
	LeakGracePeriod time.Duration
	// EventQuietPeriod: a Warning Event repeats for the same Service and
	// reason no more often than this.
	EventQuietPeriod time.Duration
	// ValidatePools serves the pool validation webhook (PoolValidator) on
	// the manager's webhook server, which must then have its certificates.
	ValidatePools bool
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() Options {
	return Options{Serve: lbclass.DefaultSelection(), LeakGracePeriod: time.Minute, EventQuietPeriod: 10 * time.Minute}
}

// Reconciler allocates and releases the addresses of one Service per
// reconcile.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder
	warn      *auditevents.Recorder
	alloc     *lbipam.Allocator
	opts      Options
	clock     clock.PassiveClock

	// fed is the version of each pool the allocator holds (poolsMu).
	poolsMu sync.Mutex
	fed     map[string]fedPool

	// statuses and poolStatuses remember what svcnet last wrote, to tell
	// another writer's change.
	statuses     repairs.Memo[[]corev1.LoadBalancerIngress]
	poolStatuses repairs.Memo[svcnetv1alpha1.LoadBalancerIPPoolStatus]
	// honouredSaid is, per Service, the honoured-field Events last said.
	honouredSaid repairs.Memo[[]string]
}

// fedPool identifies a version of a pool's spec.
type fedPool struct {
	uid        types.UID
	generation int64
}

// New returns a Reconciler. apiReader confirms that a Service is gone
// before its address is released.
func New(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts Options) *Reconciler {
	clk := clock.RealClock{}
	return &Reconciler{
		client: c, apiReader: apiReader, recorder: recorder, opts: opts, clock: clk,
		warn:  auditevents.New(recorder, clk, opts.EventQuietPeriod, auditevents.WithHistory(apiReader, ReportingController)),
		alloc: lbipam.New(),
		fed:   map[string]fedPool{},
	}
}

// handles reports whether the Service is a LoadBalancer svcnet serves.
func (r *Reconciler) handles(svc *corev1.Service) bool {
	return svc != nil && svc.DeletionTimestamp == nil && r.opts.Serve.Serves(svc)
}

func owner(key types.NamespacedName) string { return key.String() }

// Reconcile gives a LoadBalancer Service one address per family, or
// releases what a Service that no longer needs them holds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, req.NamespacedName, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		svc = nil
	}
	if !r.handles(svc) {
		return r.release(ctx, req.NamespacedName, svc)
	}
	return r.allocate(ctx, svc)
}

// held returns svcnet's IPAddresses whose parent is the Service: labelled
// so, or unlabelled in one of its pools (the label removed by hand).
func (r *Reconciler) held(ctx context.Context, key types.NamespacedName) ([]networkingv1.IPAddress, error) {
	var list networkingv1.IPAddressList
	if err := r.client.List(ctx, &list, client.MatchingFields{parentIndex: owner(key)}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(ipa networkingv1.IPAddress) bool {
		if ipa.Labels[networkingv1.LabelManagedBy] == ManagedBy {
			return false
		}
		a, err := netip.ParseAddr(ipa.Name)
		return err != nil || len(r.alloc.PoolsOf(a)) == 0
	}), nil
}

func (r *Reconciler) allocate(ctx context.Context, svc *corev1.Service) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(svc)
	var ns corev1.Namespace
	if err := r.client.Get(ctx, client.ObjectKey{Name: svc.Namespace}, &ns); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	states, err := r.poolStates(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	req, err := readRequest(svc)
	if err != nil {
		r.warn.Warn(ctx, svc, ReasonInvalidRequest, action, "%v", err)
		return ctrl.Result{}, nil
	}
	if len(req.disagreements) > 0 {
		// One Event: the events library makes a series of an object's
		// Events with the same reason, keeping the first message only.
		r.warn.Warn(ctx, svc, ReasonConflictingRequests, action, "%s", strings.Join(req.disagreements, "; "))
	}
	choice := choosePools(states, eligible(states, svc, ns.Labels), req)
	if choice.problem != "" {
		r.warn.Warn(ctx, svc, ReasonPoolUnavailable, action, "%s: no new address is given; the Service keeps those it has", choice.problem)
	}
	held, err := r.held(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	heldBy := map[corev1.IPFamily]netip.Addr{}
	for _, ipa := range held {
		a, err := netip.ParseAddr(ipa.Name)
		if err != nil {
			continue
		}
		heldBy[ipfamily.Of(a)] = a
		if ipa.Labels[networkingv1.LabelManagedBy] != ManagedBy {
			if err := r.repairLabels(ctx, &ipa, map[string]string{
				networkingv1.LabelManagedBy: ManagedBy, networkingv1.LabelIPAddressFamily: string(ipfamily.Of(a)),
			}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
				return ctrl.Result{}, err
			}
		}
	}
	var ingress []corev1.LoadBalancerIngress
	gained := false
	for _, fam := range ipfamily.OfService(svc) {
		want, asked := req.ips[fam]
		pools := choice.automatic
		if asked {
			pools = choice.onRequest
		}
		addr, got, err := r.allocateFamily(ctx, svc, familyRequest{family: fam, want: want, asked: asked, held: heldBy[fam],
			pools: pools, keep: choice.keep, blocked: choice.problem != ""})
		if err != nil {
			return ctrl.Result{}, err
		}
		if addr.IsValid() {
			ingress = append(ingress, vip(addr))
		}
		gained = gained || got
	}
	if len(ingress) > 0 {
		r.sayHonoured(svc, req, choice, gained)
	}
	return ctrl.Result{}, r.writeStatus(ctx, svc, ingress)
}

// sayHonoured emits the Normal Events that name the MetalLB annotations
// and spec.loadBalancerIP a Service with addresses was served by: when it
// commits an address, and otherwise once per Service while the fields
// stay the same (per manager start: a new leader says it once more).
// One Event per reason: the events library makes a series of an object's
// Events with the same reason and keeps the first message only.
func (r *Reconciler) sayHonoured(svc *corev1.Service, req serviceRequest, choice poolChoice, gained bool) {
	messages := map[string][]string{}
	for _, h := range req.honoured {
		if h.as == AnnotationPool && choice.problem != "" {
			continue // the pool named gave nothing
		}
		messages[h.reason] = append(messages[h.reason], h.message)
	}
	var all []string
	for _, reason := range slices.Sorted(maps.Keys(messages)) {
		all = append(all, reason+": "+strings.Join(messages[reason], "; "))
	}
	self := owner(client.ObjectKeyFromObject(svc))
	if said, ok := r.honouredSaid.Last(self); !gained && ok && slices.Equal(said, all) {
		return
	}
	r.honouredSaid.Wrote(self, "", all)
	for _, reason := range slices.Sorted(maps.Keys(messages)) {
		r.recorder.Eventf(svc, nil, corev1.EventTypeNormal, reason, action, "%s", strings.Join(messages[reason], "; "))
	}
}

// familyRequest is what a Service asks and holds in one IP family.
type familyRequest struct {
	family corev1.IPFamily
	// want is the requested address, when asked.
	want  netip.Addr
	asked bool
	// held is the address its IPAddress in the cache holds, if any.
	held netip.Addr
	// pools give a new address; keep are those whose addresses the
	// Service keeps (or takes back from its status) without a Warning.
	pools, keep []string
	// blocked: no new address may be given (the pool named is unusable).
	blocked bool
}

// allocateFamily returns the Service's address of one family: the one it
// has (unless it asked for another), a shared one, or a new one, and
// whether it committed an IPAddress for it now. An invalid address means none could be given;
// an Event says why.
func (r *Reconciler) allocateFamily(ctx context.Context, svc *corev1.Service, req familyRequest) (netip.Addr, bool, error) {
	self := owner(client.ObjectKeyFromObject(svc))
	addr, ok, gained, err := r.current(ctx, svc, req)
	if err != nil {
		return netip.Addr{}, false, err
	}
	if ok && req.asked && addr != req.want {
		if err := r.releaseAddr(ctx, svc, addr, self); err != nil {
			return netip.Addr{}, false, err
		}
		ok = false
	}
	if ok {
		if !slices.ContainsFunc(req.keep, func(p string) bool { return slices.Contains(r.alloc.PoolsOf(addr), p) }) {
			r.warn.Warn(ctx, svc, ReasonNotInPool, action, "%s is no longer in any LoadBalancerIPPool that takes this Service (pools now: %s); "+
				"it keeps the address until it is released", addr, orNone(req.keep))
		}
		return addr, gained, nil
	}
	if req.blocked {
		return netip.Addr{}, false, nil
	}
	if shared, found, err := r.share(ctx, svc, req.family == corev1.IPv4Protocol, req.want, req.asked, req.pools); err != nil || found {
		return shared, false, err
	}
	addr, pool, err := r.choose(ctx, svc, req.family == corev1.IPv4Protocol, req.want, req.asked, req.pools)
	if err != nil || !addr.IsValid() {
		return addr, false, err
	}
	r.recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonAllocated, action, "Assigned %s from LoadBalancerIPPool %s", addr, pool)
	return addr, true, nil
}

// current returns the address a Service already has in one family: the
// one its IPAddress in the cache holds; else one an earlier reconcile
// chose, committed now if it is not; else the one its status shows when
// someone deleted its IPAddress (or another controller, such as MetalLB,
// gave it), taken back while it is free. An address whose IPAddress
// another manager holds now is given up. It also reports whether it
// committed the address now.
func (r *Reconciler) current(ctx context.Context, svc *corev1.Service, req familyRequest) (addr netip.Addr, ok, created bool, err error) {
	if req.held.IsValid() {
		return req.held, true, false, nil
	}
	self := owner(client.ObjectKeyFromObject(svc))
	addr, ok = r.alloc.Owned(self, req.family == corev1.IPv4Protocol)
	pool := ""
	if !ok && !req.asked {
		// The IPAddress is gone, or was never svcnet's, and the allocator
		// does not hold the address the Service shows.
		addr, ok = statusAddr(svc, req.family)
		if ok {
			if pool, err = r.alloc.Reserve(addr, self, req.keep); err != nil {
				return netip.Addr{}, false, false, nil
			}
		}
	}
	if !ok {
		return netip.Addr{}, false, false, nil
	}
	created, err = r.commit(ctx, svc, addr, pool)
	var taken *takenError
	switch {
	case errors.As(err, &taken):
		r.alloc.Observe(addr, taken.owner)
		r.warn.Warn(ctx, svc, ReasonAllocationFailed, action, "%s is now held by %s; choosing another address", addr, taken.owner)
		return netip.Addr{}, false, false, nil
	case err != nil:
		return netip.Addr{}, false, false, err
	}
	if shown, _ := statusAddr(svc, req.family); created && shown == addr {
		r.keptShown(ctx, svc, addr, pool)
	}
	return addr, true, created, nil
}

// keptShown says why svcnet committed an address the Service's status
// already showed: svcnet gave it and someone deleted its IPAddress (a
// repair), or another controller gave it, such as MetalLB before the
// move to svcnet (an adoption, with an Event naming the writer).
func (r *Reconciler) keptShown(ctx context.Context, svc *corev1.Service, addr netip.Addr, pool string) {
	by := ""
	live := &corev1.Service{}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(svc), live); err == nil {
		by = repairs.StatusWriter(live, "loadBalancer")
	}
	if by == "" || by == repairs.Self {
		repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKindIPAddress, Object: klog.KRef("", addr.String()), Reason: repairs.ReasonDeleted,
			What: fmt.Sprintf("the IPAddress of LoadBalancer IP %s of Service %s was missing", addr, klog.KObj(svc))})
		return
	}
	from := ""
	if pool != "" {
		from = " in LoadBalancerIPPool " + pool
	}
	ctrl.LoggerFrom(ctx).Info("Adopted a LoadBalancer IP another controller gave", "service", klog.KObj(svc), "ip", addr, "writer", by, "pool", pool)
	r.recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonAdopted, action, "Kept %s, given by field manager %q; svcnet holds it now%s", addr, by, from)
}

// statusAddr returns the address of a family that a Service's
// status.loadBalancer.ingress shows.
func statusAddr(svc *corev1.Service, family corev1.IPFamily) (netip.Addr, bool) {
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && ipfamily.Of(a) == family {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// choose takes a new address (the requested one, or the first free one of
// the pools) and commits it. It returns an invalid address when none can be
// had; a Warning Event then says why.
func (r *Reconciler) choose(ctx context.Context, svc *corev1.Service, v4 bool, want netip.Addr, asked bool, pools []string) (netip.Addr, string, error) {
	self := owner(client.ObjectKeyFromObject(svc))
	for range 16 { // each round learns of one address taken behind svcnet's back
		var addr netip.Addr
		var pool string
		var err error
		if asked {
			addr = want
			pool, err = r.alloc.Reserve(want, self, pools)
		} else {
			addr, pool, err = r.alloc.Allocate(v4, self, pools)
		}
		if err != nil {
			if errors.Is(err, lbipam.ErrFull) {
				for _, p := range pools {
					metricExhausted.WithLabelValues(p).Inc()
				}
			}
			r.warn.Warn(ctx, svc, ReasonAllocationFailed, action, "no LoadBalancer IP: %v", err)
			return netip.Addr{}, "", nil
		}
		_, err = r.commit(ctx, svc, addr, pool)
		var taken *takenError
		if errors.As(err, &taken) {
			r.alloc.Observe(addr, taken.owner)
			if asked {
				r.warn.Warn(ctx, svc, ReasonAllocationFailed, action, "no LoadBalancer IP: %s is already allocated to %s", addr, taken.owner)
				return netip.Addr{}, "", nil
			}
			continue
		}
		if err != nil {
			r.alloc.Forget(addr)
			return netip.Addr{}, "", err
		}
		return addr, pool, nil
	}
	return netip.Addr{}, "", fmt.Errorf("could not commit a LoadBalancer IP for %s: every choice was taken meanwhile", self)
}

type takenError struct{ owner string }

func (e *takenError) Error() string { return "taken by " + e.owner }

// commit creates the IPAddress of addr for svc, and reports whether it did;
// one that exists already for svc is fine (its labels put back if someone
// removed its managed-by), one of anybody else's is a *takenError.
func (r *Reconciler) commit(ctx context.Context, svc *corev1.Service, addr netip.Addr, pool string) (bool, error) {
	fam := ipfamily.Of(addr)
	ipa := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: addr.String(), Labels: map[string]string{
			networkingv1.LabelManagedBy: ManagedBy, networkingv1.LabelIPAddressFamily: string(fam),
		}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: "", Resource: "services", Namespace: svc.Namespace, Name: svc.Name,
		}},
	}
	if pool != "" {
		ipa.Labels[LabelPool] = pool
	}
	err := r.client.Create(ctx, ipa)
	if err == nil {
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("creating IPAddress %s: %w", addr, err)
	}
	var existing networkingv1.IPAddress
	if err := r.apiReader.Get(ctx, client.ObjectKey{Name: addr.String()}, &existing); err != nil {
		return false, fmt.Errorf("reading IPAddress %s: %w", addr, err)
	}
	ref := existing.Spec.ParentRef
	if ref != nil && ref.Group == "" && ref.Resource == "services" && ref.Namespace == svc.Namespace && ref.Name == svc.Name {
		switch managedBy, labelled := existing.Labels[networkingv1.LabelManagedBy]; {
		case managedBy == ManagedBy:
			return false, nil
		case !labelled || managedBy == "":
			return false, r.repairLabels(ctx, &existing, ipa.Labels)
		}
	}
	return false, &takenError{owner: holder(&existing)}
}

// repairLabels puts back the labels of svcnet's IPAddress of a Service
// whose managed-by label someone removed.
func (r *Reconciler) repairLabels(ctx context.Context, ipa *networkingv1.IPAddress, labels map[string]string) error {
	patch := client.MergeFromWithOptions(ipa.DeepCopy(), client.MergeFromWithOptimisticLock{})
	what := fmt.Sprintf("labels %v", ipa.Labels)
	by := repairs.LastManagerOf(ctx, r.apiReader, ipa)
	if ipa.Labels == nil {
		ipa.Labels = map[string]string{}
	}
	for k, v := range labels {
		if _, ok := ipa.Labels[k]; !ok || k == networkingv1.LabelManagedBy || k == networkingv1.LabelIPAddressFamily {
			ipa.Labels[k] = v
		}
	}
	if err := r.client.Patch(ctx, ipa, patch); err != nil {
		return fmt.Errorf("repairing the labels of IPAddress %s: %w", ipa.Name, err)
	}
	repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKindIPAddress, Object: klog.KObj(ipa), Reason: repairs.ReasonEdited, What: what, By: by})
	return nil
}

// share finds an address of the family that Services with svc's sharing
// key hold and whose ports do not conflict with svc's.
func (r *Reconciler) share(ctx context.Context, svc *corev1.Service, v4 bool, want netip.Addr, asked bool, pools []string) (netip.Addr, bool, error) {
	key := sharingKey(svc)
	if key == "" {
		return netip.Addr{}, false, nil
	}
	var group corev1.ServiceList
	if err := r.client.List(ctx, &group, client.MatchingFields{sharingIndex: key}); err != nil {
		return netip.Addr{}, false, err
	}
	seen := map[netip.Addr]bool{}
	for i := range group.Items {
		other := &group.Items[i]
		if other.UID == svc.UID || !r.handles(other) {
			continue
		}
		for _, ing := range other.Status.LoadBalancer.Ingress {
			addr, err := netip.ParseAddr(ing.IP)
			if err != nil || addr.Is4() != v4 || seen[addr] || (asked && addr != want) {
				continue
			}
			seen[addr] = true
			if !slices.ContainsFunc(r.alloc.PoolsOf(addr), func(p string) bool { return slices.Contains(pools, p) }) {
				continue
			}
			conflict, err := r.sharingConflict(ctx, svc, addr)
			if err != nil {
				return netip.Addr{}, false, err
			}
			if conflict != "" {
				r.warn.Warn(ctx, svc, ReasonSharingConflict, action, "cannot share %s (sharing key %q): %s", addr, key, conflict)
				continue
			}
			return addr, true, nil
		}
	}
	return netip.Addr{}, false, nil
}

// sharingConflict describes why svc cannot share addr with a Service
// already using it, or returns "": the same sharing key, no port and
// protocol in common, and, when both have externalTrafficPolicy Local, the
// same selector (as MetalLB requires: the node that announces the address
// must have endpoints of both).
func (r *Reconciler) sharingConflict(ctx context.Context, svc *corev1.Service, addr netip.Addr) (string, error) {
	var users corev1.ServiceList
	if err := r.client.List(ctx, &users, client.MatchingFields{ingressIndex: addr.String()}); err != nil {
		return "", err
	}
	for i := range users.Items {
		u := &users.Items[i]
		if u.UID == svc.UID || !r.handles(u) {
			continue
		}
		if sharingKey(u) != sharingKey(svc) {
			return fmt.Sprintf("Service %s/%s uses it without the same sharing key", u.Namespace, u.Name), nil
		}
		if local(u) && local(svc) && !maps.Equal(u.Spec.Selector, svc.Spec.Selector) {
			return fmt.Sprintf("Service %s/%s uses it with externalTrafficPolicy Local and another selector", u.Namespace, u.Name), nil
		}
		for _, p := range svc.Spec.Ports {
			for _, q := range u.Spec.Ports {
				if p.Port == q.Port && p.Protocol == q.Protocol {
					return fmt.Sprintf("port %d/%s is used by Service %s/%s", p.Port, p.Protocol, u.Namespace, u.Name), nil
				}
			}
		}
	}
	return "", nil
}

// release gives back what a Service that is gone, or is no longer a
// LoadBalancer svcnet serves, holds.
func (r *Reconciler) release(ctx context.Context, key types.NamespacedName, svc *corev1.Service) (ctrl.Result, error) {
	held, err := r.held(ctx, key)
	if err != nil {
		return ctrl.Result{}, err
	}
	if svc == nil && len(held) > 0 {
		// The cache may lag: confirm before releasing anything.
		var live corev1.Service
		if err := r.apiReader.Get(ctx, key, &live); err == nil && r.handles(&live) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	var requeue time.Duration
	for i := range held {
		ipa := &held[i]
		if svc == nil {
			// Leave young addresses alone: a Service may be on its way.
			if age := r.clock.Since(ipa.CreationTimestamp.Time); age < r.opts.LeakGracePeriod {
				requeue = max(requeue, r.opts.LeakGracePeriod-age)
				continue
			}
		}
		addr, err := netip.ParseAddr(ipa.Name)
		if err != nil {
			continue
		}
		if err := r.releaseAddr(ctx, svc, addr, owner(key)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if requeue == 0 {
		// Choices never committed (a failed create) are free again; the
		// young IPAddresses left for later still hold theirs.
		for _, addr := range r.ownedAll(owner(key)) {
			r.alloc.Forget(addr)
		}
	}
	if svc != nil && svc.Spec.Type != corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 {
		if err := r.writeStatus(ctx, svc, nil); err != nil {
			return ctrl.Result{}, err
		}
	}
	if svc == nil {
		r.statuses.Forget(owner(key))
	}
	r.honouredSaid.Forget(owner(key))
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func (r *Reconciler) ownedAll(self string) []netip.Addr {
	var out []netip.Addr
	for _, v4 := range []bool{true, false} {
		if a, ok := r.alloc.Owned(self, v4); ok {
			out = append(out, a)
		}
	}
	return out
}

// releaseAddr deletes the IPAddress of addr that self holds, handing the
// address over to a Service that shares it, if there is one.
func (r *Reconciler) releaseAddr(ctx context.Context, svc *corev1.Service, addr netip.Addr, self string) error {
	successor, err := r.nextSharer(ctx, addr, self)
	if err != nil {
		return err
	}
	if successor != nil {
		r.alloc.Observe(addr, owner(client.ObjectKeyFromObject(successor)))
	}
	ipa := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addr.String()}}
	if err := r.client.Delete(ctx, ipa); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting IPAddress %s: %w", addr, err)
	}
	if successor != nil {
		pools := r.alloc.PoolsOf(addr)
		pool := ""
		if len(pools) > 0 {
			pool = pools[0]
		}
		if _, err := r.commit(ctx, successor, addr, pool); err != nil {
			return err
		}
	} else {
		r.alloc.Forget(addr)
	}
	log.FromContext(ctx).V(2).Info("Released LoadBalancer IP", "ip", addr, "successor", successor != nil)
	if svc != nil {
		r.recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonReleased, action, "Released %s", addr)
	}
	return nil
}

// nextSharer is a Service other than self that shares addr and keeps it.
func (r *Reconciler) nextSharer(ctx context.Context, addr netip.Addr, self string) (*corev1.Service, error) {
	var users corev1.ServiceList
	if err := r.client.List(ctx, &users, client.MatchingFields{ingressIndex: addr.String()}); err != nil {
		return nil, err
	}
	for i := range users.Items {
		u := &users.Items[i]
		if owner(client.ObjectKeyFromObject(u)) != self && r.handles(u) && sharingKey(u) != "" {
			return u, nil
		}
	}
	return nil, nil
}

// writeStatus sets status.loadBalancer.ingress when it differs, and
// reports a repair when someone else changed what svcnet wrote.
func (r *Reconciler) writeStatus(ctx context.Context, svc *corev1.Service, ingress []corev1.LoadBalancerIngress) error {
	have := svc.Status.LoadBalancer.Ingress
	if equalIngress(have, ingress) {
		return nil
	}
	key := owner(client.ObjectKeyFromObject(svc))
	edited := r.statuses.ChangedByOther(key, svc.ResourceVersion, have)
	by := ""
	if edited {
		by = repairs.LastManagerOf(ctx, r.apiReader, svc)
	}
	patch := client.MergeFrom(svc.DeepCopy())
	svc.Status.LoadBalancer.Ingress = ingress
	if err := r.client.Status().Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("writing status.loadBalancer of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	r.statuses.Wrote(key, svc.ResourceVersion, svc.Status.LoadBalancer.Ingress)
	if edited {
		repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: repairKindStatus, Object: klog.KObj(svc), Reason: repairs.ReasonEdited,
			What: fmt.Sprintf("ingress %s instead of %s", ingressIPs(have), ingressIPs(ingress)), By: by})
	}
	return nil
}

func local(svc *corev1.Service) bool {
	return svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func ingressIPs(ing []corev1.LoadBalancerIngress) string {
	ips := make([]string, 0, len(ing))
	for _, i := range ing {
		ips = append(ips, cmp.Or(i.IP, i.Hostname))
	}
	return "[" + strings.Join(ips, " ") + "]"
}

func equalIngress(a, b []corev1.LoadBalancerIngress) bool {
	return equality.Semantic.DeepEqual(a, b)
}

func vip(a netip.Addr) corev1.LoadBalancerIngress {
	return corev1.LoadBalancerIngress{IP: a.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}
}

// parseRequested reads the requested-addresses annotation: at most one
// address per family.
func parseRequested(v string) (map[corev1.IPFamily]netip.Addr, error) {
	out := map[corev1.IPFamily]netip.Addr{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for _, s := range strings.Split(v, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", strings.TrimSpace(s))
		}
		a = a.Unmap()
		if _, dup := out[ipfamily.Of(a)]; dup {
			return nil, fmt.Errorf("more than one address of the same family in %q", v)
		}
		out[ipfamily.Of(a)] = a
	}
	return out, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// poolStates reads the pools and ServiceCIDRs and decides which pools are Ready.
func (r *Reconciler) poolStates(ctx context.Context) (map[string]*poolState, error) {
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	if err := r.client.List(ctx, &pools); err != nil {
		return nil, err
	}
	// The pool informer's handler feeds the allocator too, but it is not
	// ordered with this controller's own watch: without this, a reconcile
	// that a pool's growth triggered could still allocate from the old
	// ranges, find them full and leave the Service Pending.
	r.syncPools(pools.Items)
	var cidrs networkingv1.ServiceCIDRList
	if err := r.client.List(ctx, &cidrs); err != nil {
		return nil, err
	}
	return judgePools(pools.Items, cidrs.Items), nil
}

// feedPool gives the allocator p's ranges, unless it already holds this
// version of p or a newer one.
func (r *Reconciler) feedPool(p *svcnetv1alpha1.LoadBalancerIPPool) {
	r.poolsMu.Lock()
	defer r.poolsMu.Unlock()
	if f, ok := r.fed[p.Name]; ok && f.uid == p.UID && f.generation >= p.Generation {
		return
	}
	rs, _ := poolRanges(p) // the usable ranges; the status names the others
	r.alloc.SetPool(lbipam.Pool{Name: p.Name, Ranges: rs, AvoidBuggyIPs: p.Spec.AvoidBuggyIPs})
	r.fed[p.Name] = fedPool{uid: p.UID, generation: p.Generation}
}

// forgetPool takes a deleted pool out of the allocator; the addresses it
// gave stay in use. With a uid, only that incarnation of the pool goes: a
// late delete must not take out a pool recreated under the same name.
func (r *Reconciler) forgetPool(name string, uid types.UID) {
	r.poolsMu.Lock()
	defer r.poolsMu.Unlock()
	if f, ok := r.fed[name]; ok && uid != "" && f.uid != uid {
		return
	}
	r.alloc.DeletePool(name)
	delete(r.fed, name)
}

// syncPools makes the allocator hold exactly the pools listed (the cache's
// view), each at its listed version or newer.
func (r *Reconciler) syncPools(pools []svcnetv1alpha1.LoadBalancerIPPool) {
	listed := make(map[string]bool, len(pools))
	for i := range pools {
		r.feedPool(&pools[i])
		listed[pools[i].Name] = true
	}
	r.poolsMu.Lock()
	var gone []string
	for name := range r.fed {
		if !listed[name] {
			gone = append(gone, name)
		}
	}
	r.poolsMu.Unlock()
	for _, name := range gone {
		r.forgetPool(name, "")
	}
}
