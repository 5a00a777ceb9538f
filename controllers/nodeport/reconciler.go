// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/portrange"
	"github.com/svcnet-io/svcnet/internal/platform/auditevents"
)

// ControllerName is the --controllers name.
const ControllerName = "nodeport"

// ReportingController is the reportingController of its Events.
const ReportingController = "svcnet-" + ControllerName

// Event reasons.
const (
	ReasonAlreadyAllocated = "PortAlreadyAllocated"
	ReasonOutOfRange       = "PortOutOfRange"
	ReasonExcluded         = "NodePortInExcludedRange"

	action = "NodePortAllocation"
)

// portIndex indexes Services by "nodePort/protocol" of each port.
const portIndex = "svcnet.io/nodeport"

// Reconciler audits one Service's nodePorts.
type Reconciler struct {
	client client.Client
	events *auditevents.Recorder
	usage  *portrange.Allocator
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// New returns a Reconciler for the range and exclusions in opts; an Event
// repeats for a Service and reason at most every quiet, across restarts too
// (apiReader reads the Events already written).
func New(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts portrange.Options, quiet time.Duration) (*Reconciler, error) {
	usage, err := portrange.New(portrange.Options{Range: opts.Range, Exclude: opts.Exclude})
	if err != nil {
		return nil, err
	}
	return &Reconciler{client: c, usage: usage, events: auditevents.New(recorder, clock.RealClock{}, quiet, auditevents.WithHistory(apiReader, ReportingController))}, nil
}

func portKeys(svc *corev1.Service) []string {
	var out []string
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, fmt.Sprintf("%d/%s", p.NodePort, p.Protocol))
		}
	}
	if svc.Spec.HealthCheckNodePort != 0 {
		out = append(out, fmt.Sprintf("%d/%s", svc.Spec.HealthCheckNodePort, corev1.ProtocolTCP))
	}
	return out
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// SetupWithManager registers the controller and its usage metrics.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Service{}, portIndex, func(obj client.Object) []string {
		return portKeys(obj.(*corev1.Service))
	}); err != nil {
		return err
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Service{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(feed.NodePortHandler(r.usage)); err != nil {
		return err
	}
	registerUsage(r.usage)
	// A change to one Service can settle a conflict of another: audit the
	// Services that share any of its ports too.
	sharers := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		out := []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
		for _, k := range portKeys(obj.(*corev1.Service)) {
			var others corev1.ServiceList
			if err := r.client.List(ctx, &others, client.MatchingFields{portIndex: k}); err == nil {
				for i := range others.Items {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&others.Items[i])})
				}
			}
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&corev1.Service{}, sharers).
		Complete(r)
}

// Reconcile audits a Service.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, req.NamespacedName, svc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rng := r.usage.Range()
	for _, k := range portKeys(svc) {
		portStr, proto, _ := strings.Cut(k, "/")
		port, _ := strconv.Atoi(portStr)
		if !rng.Contains(port) {
			r.events.Warn(ctx, svc, ReasonOutOfRange, action,
				"Port %d/%s is not within the port range %v; please recreate service", port, proto, rng)
			continue
		}
		if ex, excluded := r.usage.Excluded(port); excluded {
			r.events.Warn(ctx, svc, ReasonExcluded, action,
				"Port %d/%s is inside the excluded node port range %v; please recreate service", port, proto, ex)
		}
		var others corev1.ServiceList
		if err := r.client.List(ctx, &others, client.MatchingFields{portIndex: k}); err != nil {
			return ctrl.Result{}, err
		}
		var names []string
		for i := range others.Items {
			o := &others.Items[i]
			if o.Namespace != svc.Namespace || o.Name != svc.Name {
				names = append(names, client.ObjectKeyFromObject(o).String())
			}
		}
		if len(names) > 0 {
			r.events.Warn(ctx, svc, ReasonAlreadyAllocated, action,
				"Port %d/%s was assigned to multiple services (also %s); please recreate service", port, proto, strings.Join(names, ", "))
		}
	}
	return ctrl.Result{}, nil
}
