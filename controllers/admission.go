// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/admission"
)

// ClusterIPName is the --controllers name of ClusterIP allocation at
// admission.
const ClusterIPName = "clusterip"

// DefaultReuseDelay is how long a released ClusterIP or nodePort stays out
// of use by default.
const DefaultReuseDelay = admission.DefaultReuseDelay

// ClusterIPOptions configures ClusterIP allocation at admission.
type ClusterIPOptions struct {
	// ReuseDelay is how long a released ClusterIP stays out of use.
	ReuseDelay time.Duration
}

// setupAdmission runs once for the controllers that allocate at admission.
func setupAdmission(mgr ctrl.Manager, opts Options, enabled map[string]bool) error {
	aopts := admission.Options{
		ClusterIP:           enabled[ClusterIPName],
		ClusterIPReuseDelay: opts.ClusterIP.ReuseDelay,
		NodePort:            enabled[NodePortName],
	}
	if aopts.NodePort {
		ports, err := opts.NodePort.Parse()
		if err != nil {
			return err
		}
		aopts.NodePorts = ports
	}
	return admission.Setup(mgr, aopts)
}

// NeedsWebhook reports whether the enabled controllers serve the admission
// webhook (and so need its certificates).
func NeedsWebhook(spec []string) bool {
	enabled, err := Enabled(spec)
	return err == nil && servesWebhook(enabled)
}

// servesWebhook: the webhook server runs for allocation at admission.
func servesWebhook(enabled map[string]bool) bool {
	return enabled[ClusterIPName] || enabled[NodePortName]
}
