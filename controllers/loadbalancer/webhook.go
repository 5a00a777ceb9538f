// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"
	"fmt"
	"net/http"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// PoolWebhookPath is where the webhook server answers pool validation.
const PoolWebhookPath = "/validate-networking-svcnet-io-v1alpha1-loadbalancerippool"

// +kubebuilder:webhook:path=/validate-networking-svcnet-io-v1alpha1-loadbalancerippool,mutating=false,failurePolicy=ignore,sideEffects=None,groups=networking.svcnet.io,resources=loadbalancerippools,verbs=create;update,versions=v1alpha1,name=loadbalancerippools.svcnet.io,admissionReviewVersions=v1,timeoutSeconds=5,matchPolicy=Equivalent

// PoolValidator refuses, at admission, a pool whose addresses overlap an
// enabled pool's or a ServiceCIDR's, naming the other, as MetalLB does: one
// operator's mistake is stopped before it reaches the controller, which
// would keep the serving pool anyway. Disabled pools and pools whose spec
// the controller rejects pass (their status says why). With
// failurePolicy Ignore, a pool created while no manager answers still
// reaches the controller.
type PoolValidator struct {
	reader  client.Reader
	decoder admission.Decoder
}

// NewPoolValidator reads pools and ServiceCIDRs from reader, which should
// read the API server itself (a pool created a moment before must count).
func NewPoolValidator(reader client.Reader, decoder admission.Decoder) *PoolValidator {
	return &PoolValidator{reader: reader, decoder: decoder}
}

var _ admission.Handler = (*PoolValidator)(nil)

// Handle implements admission.Handler.
func (v *PoolValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	var pool svcnetv1alpha1.LoadBalancerIPPool
	if err := v.decoder.Decode(req, &pool); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pool.Spec.Disabled {
		return admission.Allowed("")
	}
	ranges, err := poolRanges(&pool)
	if err != nil {
		return admission.Allowed("")
	}
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	if err := v.reader.List(ctx, &pools); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	for i := range pools.Items {
		other := &pools.Items[i]
		if other.Name == pool.Name || other.Spec.Disabled {
			continue
		}
		theirs, err := poolRanges(other)
		if err != nil {
			continue
		}
		if r, o, ok := overlapping(ranges, theirs); ok {
			return admission.Denied(fmt.Sprintf("range %s overlaps range %s of LoadBalancerIPPool %s", r, o, other.Name))
		}
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := v.reader.List(ctx, &cidrs); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if msg := overlapsCIDR(ranges, cidrs.Items); msg != "" {
		return admission.Denied(msg)
	}
	return admission.Allowed("")
}
