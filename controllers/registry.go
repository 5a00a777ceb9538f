// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"slices"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
)

// controller is one entry of the registry.
type controller struct {
	name      string
	onDefault bool
	// setup registers a controller; nil when it is only a part of the
	// admission webhook.
	setup func(mgr ctrl.Manager, opts Options, enabled map[string]bool) error
	// admission: the controller allocates in the admission webhook, which
	// setupAdmission registers once for all of them.
	admission bool
}

// registry lists every controller svcnet has, in the order they are set up.
var registry = []controller{
	{name: EndpointSliceName, onDefault: true, setup: setupEndpointSlice},
	{name: EndpointSliceMirroringName, onDefault: true, setup: setupEndpointSliceMirroring},
	{name: ServiceCIDRName, onDefault: true, setup: setupServiceCIDR},
	{name: IPAddressName, onDefault: true, setup: setupIPAddress},
	{name: ClusterIPName, onDefault: true, admission: true},
	// nodeport: allocation at admission, and the audit.
	{name: NodePortName, onDefault: true, setup: setupNodePortAudit, admission: true},
	{name: LoadBalancerName, onDefault: true, setup: setupLoadBalancer},
	{name: AnnouncementName, onDefault: true, setup: setupAnnouncement},
}

// Names returns the names of every controller, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for _, c := range registry {
		names = append(names, c.name)
	}
	slices.Sort(names)
	return names
}

// Enabled resolves a --controllers list to the set of controllers to run.
// An unknown name is an error that lists the valid ones.
func Enabled(spec []string) (map[string]bool, error) {
	if len(spec) == 0 {
		spec = []string{"*"}
	}
	known := Names()
	star := false
	explicit := map[string]bool{}
	for _, raw := range spec {
		item := strings.TrimSpace(raw)
		switch item {
		case "*":
			star = true
			continue
		case "", "-":
			return nil, fmt.Errorf("--controllers: empty controller name in %q; valid names: %s", strings.Join(spec, ","), strings.Join(known, ", "))
		}
		name, on := strings.CutPrefix(item, "-")
		on = !on
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("--controllers: unknown controller %q; valid names: %s (or * for all)", name, strings.Join(known, ", "))
		}
		if prev, seen := explicit[name]; seen && prev != on {
			return nil, fmt.Errorf("--controllers: %q is both enabled and disabled", name)
		}
		explicit[name] = on
	}
	enabled := map[string]bool{}
	for _, c := range registry {
		on, set := explicit[c.name]
		switch {
		case set:
			enabled[c.name] = on
		default:
			enabled[c.name] = star && c.onDefault
		}
	}
	return enabled, nil
}

// Setup registers every enabled controller with mgr, with the defaults for
// the options left at zero. It is the one function that production,
// `svcnet up`, svcnet's envtest suites and other projects' share.
func Setup(mgr ctrl.Manager, opts Options) error {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return err
	}
	enabled, err := Enabled(opts.Controllers)
	if err != nil {
		return err
	}
	log := mgr.GetLogger().WithName("setup")
	admission := false
	for _, c := range registry {
		if !enabled[c.name] {
			log.Info("Controller disabled", "controller", c.name)
			continue
		}
		admission = admission || c.admission
		if c.setup != nil {
			if err := c.setup(mgr, opts, enabled); err != nil {
				return fmt.Errorf("setting up controller %s: %w", c.name, err)
			}
		}
		log.Info("Controller enabled", "controller", c.name)
	}
	if admission {
		if err := setupAdmission(mgr, opts, enabled); err != nil {
			return fmt.Errorf("setting up the admission webhook: %w", err)
		}
	}
	return nil
}
