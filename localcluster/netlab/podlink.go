// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package netlab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
)

// wirePod connects a new Pod namespace to its node over netlink, from this
// process: a veth pair (hostSide in the node, eth0 in the Pod), the Pod's
// address on eth0, a route to it in the node, and in the Pod a default
// route through the node's gateway address. Pods come and go often; two
// `ip -batch` processes did the same in several times the time.
func wirePod(nodeNS, podNS, hostSide string, ip netip.Addr) error {
	nodeFd, err := vns.GetFromPath(Path(nodeNS))
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", nodeNS, err)
	}
	defer nodeFd.Close()
	podFd, err := vns.GetFromPath(Path(podNS))
	if err != nil {
		return fmt.Errorf("opening namespace %s: %w", podNS, err)
	}
	defer podFd.Close()
	node, err := netlink.NewHandleAt(nodeFd)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", nodeNS, err)
	}
	defer node.Close()
	pod, err := netlink.NewHandleAt(podFd)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", podNS, err)
	}
	defer pod.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostSide, Flags: net.FlagUp},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(podFd),
	}
	if err := node.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s in %s: %w", hostSide, nodeNS, err)
	}
	host, err := node.LinkByName(hostSide)
	if err != nil {
		return fmt.Errorf("veth %s in %s: %w", hostSide, nodeNS, err)
	}
	podAddr := &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}
	// Replace, not add: the route of an earlier Pod with this address goes
	// with its namespace, which the kernel may still be taking down.
	if err := node.RouteReplace(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: podAddr, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to %s in %s: %w", ip, nodeNS, err)
	}

	lo, err := pod.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", podNS, err)
	}
	eth0, err := pod.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 in %s: %w", podNS, err)
	}
	for _, l := range []netlink.Link{lo, eth0} {
		if err := pod.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up in %s: %w", l.Attrs().Name, podNS, err)
		}
	}
	if err := pod.AddrAdd(eth0, &netlink.Addr{IPNet: podAddr}); err != nil {
		return fmt.Errorf("address %s in %s: %w", ip, podNS, err)
	}
	gw := net.ParseIP(gatewayIP)
	if err := pod.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the gateway in %s: %w", podNS, err)
	}
	if err := pod.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route in %s: %w", podNS, err)
	}
	return nil
}
