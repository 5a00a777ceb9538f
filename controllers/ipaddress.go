// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/ipaddress"
)

// IPAddressName is the ipaddress audit's --controllers name.
const IPAddressName = ipaddress.ControllerName

func setupIPAddress(mgr ctrl.Manager, opts Options, _ map[string]bool) error {
	iopts := ipaddress.Options{EventQuietPeriod: opts.Audit.EventQuietPeriod, LeakGracePeriod: opts.Audit.LeakGracePeriod}
	return ipaddress.New(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetEventRecorder(ipaddress.ReportingController), iopts).SetupWithManager(mgr)
}
