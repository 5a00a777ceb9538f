// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/servicecidr"
)

// ServiceCIDRName is the servicecidr controller's --controllers name.
const ServiceCIDRName = servicecidr.ControllerName

func setupServiceCIDR(mgr ctrl.Manager, _ Options, _ map[string]bool) error {
	reader := servicecidr.WithAPIReader(mgr.GetAPIReader())
	if err := servicecidr.New(mgr.GetClient(), reader).SetupWithManager(mgr); err != nil {
		return err
	}
	return servicecidr.NewBinding(mgr.GetClient(), reader).SetupWithManager(mgr)
}
