// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"errors"
	"fmt"
	"time"

	"github.com/svcnet-io/svcnet/internal/lbclass"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/controllers/endpointslicemirroring"
	"github.com/svcnet-io/svcnet/controllers/ipaddress"
)

// Options configures every controller. A field belongs to the controller
// named in its comment; the others ignore it. The zero value is usable:
// Setup gives every field left at zero the upstream default (svcnet's own
// where upstream has none), as DefaultOptions lists them; a zero
// ReuseDelay keeps its meaning, immediate reuse, which is upstream's.
type Options struct {
	// Controllers selects the controllers to run, with kube-controller-manager's
	// syntax: "*" enables all that are on by default, "name" enables one,
	// "-name" disables one. Empty means "*".
	Controllers []string

	// EndpointSlice configures the endpointslice controller.
	EndpointSlice EndpointSliceOptions
	// EndpointSliceMirroring configures the endpointslicemirroring
	// controller.
	EndpointSliceMirroring EndpointSliceMirroringOptions
	// ClusterIP configures the clusterip admission allocator.
	ClusterIP ClusterIPOptions
	// NodePort configures nodePort allocation and the nodeport audit.
	NodePort NodePortOptions
	// LoadBalancer configures the loadbalancer controller.
	LoadBalancer LoadBalancerOptions
	// Audit holds what the ipaddress, nodeport and loadbalancer
	// controllers share.
	Audit AuditOptions
}

// AuditOptions are the settings the auditing controllers (ipaddress,
// nodeport, loadbalancer) share.
type AuditOptions struct {
	// EventQuietPeriod: a Warning Event repeats for the same object and
	// reason at most this often (--audit-event-quiet-period).
	EventQuietPeriod time.Duration
	// LeakGracePeriod: an IPAddress whose Service does not hold it is
	// deleted only once it is this old (--ipaddress-leak-grace-period;
	// ipaddress and loadbalancer).
	LeakGracePeriod time.Duration
}

// DefaultOptions are the defaults of `svcnet manager`.
func DefaultOptions() Options {
	return Options{
		Controllers:            []string{"*"},
		EndpointSlice:          endpointslice.DefaultOptions(),
		EndpointSliceMirroring: endpointslicemirroring.DefaultOptions(),
		ClusterIP:              ClusterIPOptions{ReuseDelay: DefaultReuseDelay},
		NodePort:               NodePortOptions{Range: DefaultNodePortRange, ReuseDelay: DefaultReuseDelay},
		LoadBalancer:           LoadBalancerOptions{Selection: lbclass.DefaultSelection()},
		Audit:                  AuditOptions{EventQuietPeriod: 10 * time.Minute, LeakGracePeriod: ipaddress.DefaultLeakGracePeriod},
	}
}

// withDefaults fills the fields left at zero from DefaultOptions, except
// the reuse delays, whose zero means immediate reuse.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if len(o.Controllers) == 0 {
		o.Controllers = d.Controllers
	}
	if o.EndpointSlice.MaxEndpointsPerSlice == 0 {
		o.EndpointSlice.MaxEndpointsPerSlice = d.EndpointSlice.MaxEndpointsPerSlice
	}
	if o.EndpointSlice.Workers == 0 {
		o.EndpointSlice.Workers = d.EndpointSlice.Workers
	}
	if o.EndpointSliceMirroring.MaxEndpointsPerSubset == 0 {
		o.EndpointSliceMirroring.MaxEndpointsPerSubset = d.EndpointSliceMirroring.MaxEndpointsPerSubset
	}
	if o.EndpointSliceMirroring.Workers == 0 {
		o.EndpointSliceMirroring.Workers = d.EndpointSliceMirroring.Workers
	}
	if o.NodePort.Range == "" {
		o.NodePort.Range = d.NodePort.Range
	}
	if o.LoadBalancer.Class == "" {
		o.LoadBalancer.Class = d.LoadBalancer.Class
	}
	if o.Audit.EventQuietPeriod == 0 {
		o.Audit.EventQuietPeriod = d.Audit.EventQuietPeriod
	}
	if o.Audit.LeakGracePeriod == 0 {
		o.Audit.LeakGracePeriod = d.Audit.LeakGracePeriod
	}
	return o
}

// Validate checks the options of the enabled controllers, after the
// defaults for fields left at zero. Each error names the Go field and the
// `svcnet manager` flag that sets it.
func (o Options) Validate() error {
	o = o.withDefaults()
	enabled, err := Enabled(o.Controllers)
	if err != nil {
		return err
	}
	var errs []error
	if enabled[EndpointSliceName] {
		if err := o.EndpointSlice.Validate(); err != nil {
			errs = append(errs, prefixOptionErrors(err, "EndpointSlice."))
		}
	}
	if enabled[EndpointSliceMirroringName] {
		errs = append(errs, validateMirroring(o.EndpointSliceMirroring)...)
	}
	if enabled[NodePortName] {
		if _, err := o.NodePort.Parse(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []struct {
		field, flag string
		value       time.Duration
	}{
		{"ClusterIP.ReuseDelay", "--clusterip-reuse-delay", o.ClusterIP.ReuseDelay},
		{"Audit.EventQuietPeriod", "--audit-event-quiet-period", o.Audit.EventQuietPeriod},
		{"Audit.LeakGracePeriod", "--ipaddress-leak-grace-period", o.Audit.LeakGracePeriod},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s (%s) must not be negative, got %v", d.field, d.flag, d.value))
		}
	}
	return errors.Join(errs...)
}

// validateMirroring checks the endpointslicemirroring options with
// kube-controller-manager's bounds (after the defaults, so 0 is never seen
// here for the counts).
func validateMirroring(m EndpointSliceMirroringOptions) []error {
	var errs []error
	if m.MaxEndpointsPerSubset < 1 || m.MaxEndpointsPerSubset > endpointslicemirroring.MaxMaxEndpointsPerSubset {
		errs = append(errs, fmt.Errorf("EndpointSliceMirroring.MaxEndpointsPerSubset (--mirroring-max-endpoints-per-subset) must be between 1 and %d, got %d",
			endpointslicemirroring.MaxMaxEndpointsPerSubset, m.MaxEndpointsPerSubset))
	}
	if m.Workers < 1 {
		errs = append(errs, fmt.Errorf("EndpointSliceMirroring.Workers (--mirroring-concurrent-service-endpoint-syncs) must be at least 1, got %d", m.Workers))
	}
	if m.BatchPeriod < 0 {
		errs = append(errs, fmt.Errorf("EndpointSliceMirroring.BatchPeriod (--mirroring-endpointslice-updates-batch-period) must not be negative, got %s", m.BatchPeriod))
	}
	return errs
}

// prefixOptionErrors puts prefix before the Field of every
// *endpointslice.OptionError in err (one, or several joined).
func prefixOptionErrors(err error, prefix string) error {
	all := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	}
	for _, e := range all {
		var oe *endpointslice.OptionError
		if errors.As(e, &oe) {
			oe.Field = prefix + oe.Field
		}
	}
	return err
}
