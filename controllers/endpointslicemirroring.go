// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/endpointslicemirroring"
)

// EndpointSliceMirroringName is the endpointslicemirroring controller's
// --controllers name.
const EndpointSliceMirroringName = endpointslicemirroring.ControllerName

// EndpointSliceMirroringOptions configures the endpointslicemirroring
// controller.
type EndpointSliceMirroringOptions = endpointslicemirroring.Options

func setupEndpointSliceMirroring(mgr ctrl.Manager, opts Options, _ map[string]bool) error {
	recorder := mgr.GetEventRecorder(endpointslicemirroring.ReportingController)
	return endpointslicemirroring.New(mgr.GetClient(), mgr.GetAPIReader(), recorder, opts.EndpointSliceMirroring).SetupWithManager(mgr)
}
