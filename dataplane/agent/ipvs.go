// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// ipvsDevice is the dummy device kube-proxy's ipvs mode puts every
// Service address on. Left behind, those addresses stay local to the
// node: the node answers for them itself (ARP, and connections that no
// DNAT rule claims) instead of the agent's rules deciding.
const ipvsDevice = "kube-ipvs0"

// removeIPVSDevice deletes kube-ipvs0 from the node, as kube-proxy's
// cleanup of its ipvs mode does; it tells whether there was one.
func removeIPVSDevice(netnsPath string) (bool, error) {
	h, err := netns.NetlinkHandle(netnsPath)
	if err != nil {
		return false, err
	}
	defer h.Close()
	link, err := h.LinkByName(ipvsDevice)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return false, nil
		}
		return false, fmt.Errorf("looking up %s: %w", ipvsDevice, err)
	}
	if err := h.LinkDel(link); err != nil {
		return false, fmt.Errorf("deleting %s: %w", ipvsDevice, err)
	}
	return true, nil
}

// removeIPVSDeviceLogged removes kube-ipvs0 and says so; a failure is
// logged, not fatal, as the other leftovers' are.
func removeIPVSDeviceLogged(netnsPath string, log logr.Logger) {
	switch removed, err := removeIPVSDevice(netnsPath); {
	case err != nil:
		log.Error(err, "Could not remove kube-proxy's ipvs device")
	case removed:
		log.Info("Removed kube-proxy's ipvs device, which held the Service addresses", "device", ipvsDevice)
	}
}
