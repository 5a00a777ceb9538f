// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the webhook server serves the handler.
const Path = "/mutate-v1-service"

// The configuration controller-gen writes to config/webhook. failurePolicy
// Ignore: with svcnet down, kube-apiserver allocates on its own.
// +kubebuilder:webhook:path=/mutate-v1-service,mutating=true,failurePolicy=ignore,sideEffects=NoneOnDryRun,groups="",resources=services,verbs=create;update,versions=v1,name=services.svcnet.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent,reinvocationPolicy=Never

// assigner is one allocation concern of the handler.
type assigner interface {
	assign(ctx context.Context, svc, old *corev1.Service, dryRun bool) (undo func(), warnings []string, err error)
}

// Handler answers AdmissionReviews for Services.
type Handler struct {
	decoder admission.Decoder
	parts   []assigner
	// active reports whether this replica may allocate: it is the leader
	// and its caches are in sync.
	active func() bool
}

var _ admission.Handler = (*Handler)(nil)

// Handle fills what the Service lacks, or denies a request whose explicit
// values cannot be honoured.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	resp, outcome := h.handle(ctx, req)
	admissionDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (admission.Response, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed(""), "unchanged"
	}
	if !h.active() {
		return admission.Allowed("svcnet is not the leader or not in sync: kube-apiserver allocates"), "passed"
	}
	svc := &corev1.Service{}
	if err := h.decoder.DecodeRaw(req.Object, svc); err != nil {
		return admission.Errored(http.StatusBadRequest, err), "denied"
	}
	if svc.Namespace == "" {
		svc.Namespace = req.Namespace
	}
	if svc.Name == "" {
		svc.Name = req.Name
	}
	var old *corev1.Service
	if req.Operation == admissionv1.Update {
		old = &corev1.Service{}
		if err := h.decoder.DecodeRaw(req.OldObject, old); err != nil {
			return admission.Errored(http.StatusBadRequest, err), "denied"
		}
	}
	orig := svc.DeepCopy()
	keepAllocated(svc, old)
	dryRun := ptr.Deref(req.DryRun, false)
	var undos []func()
	var warnings []string
	for _, p := range h.parts {
		undo, w, err := p.assign(ctx, svc, old, dryRun)
		if err != nil {
			for _, u := range undos {
				u()
			}
			var uerr userError
			if errors.As(err, &uerr) {
				return admission.Denied(uerr.msg), "denied"
			}
			// Our own trouble (e.g. a cache read): let kube-apiserver allocate.
			ctrl.LoggerFrom(ctx).Error(err, "Admitting Service unchanged", "service", klog.KRef(req.Namespace, req.Name))
			return admission.Allowed("svcnet could not allocate: " + err.Error()), "passed"
		}
		undos = append(undos, undo)
		warnings = append(warnings, w...)
	}
	if equality.Semantic.DeepEqual(orig.Spec, svc.Spec) {
		return admission.Allowed("").WithWarnings(warnings...), "unchanged"
	}
	if ops, ok := allocationPatch(orig, svc); ok {
		return admission.Patched("", ops...).WithWarnings(warnings...), "patched"
	}
	raw, err := json.Marshal(svc)
	if err != nil {
		for _, u := range undos {
			u()
		}
		return admission.Errored(http.StatusInternalServerError, err), "denied"
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw).WithWarnings(warnings...), "patched"
}

// keepAllocated copies values an update leaves empty from the old object,
// as kube-apiserver does before it validates (kubectl apply of a manifest
// without them must not change them).
func keepAllocated(svc, old *corev1.Service) {
	if old == nil {
		return
	}
	if needsClusterIP(svc) && needsClusterIP(old) && svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, append([]string(nil), old.Spec.ClusterIPs...)
	}
	if needsNodePorts(svc) && needsNodePorts(old) {
		keepNodePorts(svc, old)
	}
	if needsHealthCheckNodePort(svc) && needsHealthCheckNodePort(old) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}

// keepNodePorts gives each port of svc without a nodePort the nodePort of
// the old port with the same name, as kube-apiserver's update does: a
// manifest that changes a port's number, protocol or targetPort keeps its
// nodePort, so load balancers and firewalls pointing at it still work. An
// old nodePort that svc gives explicitly to one of its ports is not copied
// to another.
func keepNodePorts(svc, old *corev1.Service) {
	explicit := map[int32]bool{}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			explicit[p.NodePort] = true
		}
	}
	byName := make(map[string]int32, len(old.Spec.Ports))
	for _, o := range old.Spec.Ports {
		byName[o.Name] = o.NodePort
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.NodePort != 0 {
			continue
		}
		if np := byName[p.Name]; !explicit[np] {
			p.NodePort = np
		}
	}
}

// allocationPatch writes the JSON patch for the fields the allocators set
// directly, without marshalling and diffing the whole Service; ok is false
// when anything else changed.
func allocationPatch(orig, svc *corev1.Service) ([]jsonpatch.JsonPatchOperation, bool) {
	var ops []jsonpatch.JsonPatchOperation
	set := func(path string, v any) {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: v})
	}
	rest := orig.Spec.DeepCopy()
	if orig.Spec.ClusterIP != svc.Spec.ClusterIP {
		set("/spec/clusterIP", svc.Spec.ClusterIP)
		rest.ClusterIP = svc.Spec.ClusterIP
	}
	if !slices.Equal(orig.Spec.ClusterIPs, svc.Spec.ClusterIPs) {
		set("/spec/clusterIPs", svc.Spec.ClusterIPs)
		rest.ClusterIPs = svc.Spec.ClusterIPs
	}
	if orig.Spec.HealthCheckNodePort != svc.Spec.HealthCheckNodePort {
		set("/spec/healthCheckNodePort", svc.Spec.HealthCheckNodePort)
		rest.HealthCheckNodePort = svc.Spec.HealthCheckNodePort
	}
	if len(orig.Spec.Ports) == len(svc.Spec.Ports) {
		for i := range svc.Spec.Ports {
			if orig.Spec.Ports[i].NodePort != svc.Spec.Ports[i].NodePort {
				set(fmt.Sprintf("/spec/ports/%d/nodePort", i), svc.Spec.Ports[i].NodePort)
				rest.Ports[i].NodePort = svc.Spec.Ports[i].NodePort
			}
		}
	}
	return ops, equality.Semantic.DeepEqual(*rest, svc.Spec)
}
