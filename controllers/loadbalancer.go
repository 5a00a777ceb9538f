// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
)

// LoadBalancerName is the loadbalancer controller's --controllers name: it
// gives LoadBalancer Services addresses from pools.
const LoadBalancerName = loadbalancer.ControllerName

// LoadBalancerOptions configures the loadbalancer controller.
type LoadBalancerOptions struct {
	// Class is the spec.loadBalancerClass served, besides none.
	Class string
}

func setupLoadBalancer(mgr ctrl.Manager, opts Options, enabled map[string]bool) error {
	lopts := loadbalancer.Options{
		Class:            opts.LoadBalancer.Class,
		LeakGracePeriod:  opts.Audit.LeakGracePeriod,
		EventQuietPeriod: opts.Audit.EventQuietPeriod,
		// Pools are validated where the webhook server runs anyway, for
		// the allocation at admission.
		ValidatePools: servesWebhook(enabled),
	}
	return loadbalancer.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(loadbalancer.ReportingController), lopts).SetupWithManager(mgr)
}
