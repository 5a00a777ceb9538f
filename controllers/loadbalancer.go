// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/internal/lbclass"
)

// LoadBalancerName is the loadbalancer controller's --controllers name: it
// gives LoadBalancer Services addresses from pools.
const LoadBalancerName = loadbalancer.ControllerName

// LoadBalancerOptions configures the loadbalancer controller: the
// Services it serves, by class (--load-balancer-class,
// --load-balancer-class-only).
type LoadBalancerOptions struct {
	lbclass.Selection
}

func setupLoadBalancer(mgr ctrl.Manager, opts Options, enabled map[string]bool) error {
	lopts := loadbalancer.Options{
		Serve:            opts.LoadBalancer.Selection,
		LeakGracePeriod:  opts.Audit.LeakGracePeriod,
		EventQuietPeriod: opts.Audit.EventQuietPeriod,
		// Pools are validated where the webhook server runs anyway, for
		// the allocation at admission.
		ValidatePools: servesWebhook(enabled),
	}
	return loadbalancer.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(loadbalancer.ReportingController), lopts).SetupWithManager(mgr)
}
