// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package controllers

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/controllers/announcement"
)

// AnnouncementName is the announcement controller's --controllers name: it
// judges LoadBalancerAnnouncements (malformed, overlapping) for the agents.
const AnnouncementName = announcement.ControllerName

func setupAnnouncement(mgr ctrl.Manager, _ Options, _ map[string]bool) error {
	return announcement.New(mgr.GetClient()).SetupWithManager(mgr)
}
