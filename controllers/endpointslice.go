// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
)

// EndpointSliceName is the endpointslice controller's --controllers name.
const EndpointSliceName = endpointslice.ControllerName

// EndpointSliceOptions configures the endpointslice controller.
type EndpointSliceOptions = endpointslice.Options

func setupEndpointSlice(mgr ctrl.Manager, opts Options, _ map[string]bool) error {
	recorder := mgr.GetEventRecorder(endpointslice.ReportingController)
	return endpointslice.New(mgr.GetClient(), mgr.GetAPIReader(), opts.EndpointSlice,
		endpointslice.WithEventRecorder(recorder)).SetupWithManager(mgr)
}
