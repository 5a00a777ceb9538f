// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package netlab

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// wirePod connects a new Pod namespace to its node over netlink, from this
// process: a veth pair (hostSide in the node, eth0 in the Pod), the Pod's
// addresses (one a family) on eth0, a route to each in the node, and in
// the Pod a default route of each family through the node's gateway
// address. Pods come and go often; two `ip -batch` processes did the same
// in several times the time.
func wirePod(nodeNS, podNS, hostSide string, ips []netip.Addr) error {
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
	w := podWiring{node: node, pod: pod, nodeNS: nodeNS, podNS: podNS}
	if err := w.veth(hostSide, podFd); err != nil {
		return err
	}
	for _, ip := range ips {
		if err := w.address(ip); err != nil {
			return err
		}
	}
	return nil
}

// podWiring is one Pod's veth being wired, the netlink handles of both
// ends open.
type podWiring struct {
	node, pod     *netlink.Handle
	nodeNS, podNS string
	host, eth0    netlink.Link
}

// veth makes the pair and sets both ends, and the Pod's lo, up.
func (w *podWiring) veth(hostSide string, podFd vns.NsHandle) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostSide, Flags: net.FlagUp},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(podFd),
	}
	if err := w.node.LinkAdd(veth); err != nil {
		return fmt.Errorf("adding veth %s in %s: %w", hostSide, w.nodeNS, err)
	}
	var err error
	if w.host, err = w.node.LinkByName(hostSide); err != nil {
		return fmt.Errorf("veth %s in %s: %w", hostSide, w.nodeNS, err)
	}
	lo, err := w.pod.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", w.podNS, err)
	}
	if w.eth0, err = w.pod.LinkByName("eth0"); err != nil {
		return fmt.Errorf("eth0 in %s: %w", w.podNS, err)
	}
	for _, l := range []netlink.Link{lo, w.eth0} {
		if err := w.pod.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up in %s: %w", l.Attrs().Name, w.podNS, err)
		}
	}
	return nil
}

// address gives the Pod ip, routes it from the node, and routes the Pod's
// traffic of ip's family to the node's gateway address.
func (w *podWiring) address(ip netip.Addr) error {
	podAddr := &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}
	// Replace, not add: the route of an earlier Pod with this address goes
	// with its namespace, which the kernel may still be taking down.
	if err := w.node.RouteReplace(&netlink.Route{LinkIndex: w.host.Attrs().Index, Dst: podAddr, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to %s in %s: %w", ip, w.nodeNS, err)
	}
	if err := w.pod.AddrAdd(w.eth0, &netlink.Addr{IPNet: podAddr, Flags: nodad(ip)}); err != nil {
		return fmt.Errorf("address %s in %s: %w", ip, w.podNS, err)
	}
	if ip.Is6() {
		return w.defaultRouteV6()
	}
	gw := net.ParseIP(gatewayIP)
	if err := w.pod.RouteAdd(&netlink.Route{LinkIndex: w.eth0.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the gateway in %s: %w", w.podNS, err)
	}
	if err := w.pod.RouteAdd(&netlink.Route{LinkIndex: w.eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route in %s: %w", w.podNS, err)
	}
	return nil
}

// defaultRouteV6 gives the node's end of the veth the IPv6 gateway
// address, link-local, and routes the Pod's IPv6 traffic to it.
func (w *podWiring) defaultRouteV6() error {
	gw := net.ParseIP(gatewayIPv6)
	gwAddr := &netlink.Addr{IPNet: &net.IPNet{IP: gw, Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	if err := w.node.AddrAdd(w.host, gwAddr); err != nil {
		return fmt.Errorf("the IPv6 gateway address on %s in %s: %w", w.host.Attrs().Name, w.nodeNS, err)
	}
	if err := w.pod.RouteAdd(&netlink.Route{LinkIndex: w.eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("IPv6 default route in %s: %w", w.podNS, err)
	}
	return nil
}

// nodad are the address flags of ip: an IPv6 address skips duplicate
// address detection (the Pod alone holds it).
func nodad(ip netip.Addr) int {
	if ip.Is6() {
		return unix.IFA_F_NODAD
	}
	return 0
}
