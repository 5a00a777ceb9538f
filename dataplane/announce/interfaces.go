// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// interfaces looks up the node's interfaces, inside its namespace.
type interfaces struct{ netns string }

func (i *interfaces) exists(name string) bool {
	err := netns.Do(i.netns, func() error {
		_, err := netlink.LinkByName(name)
		return err
	})
	return err == nil
}

// ofInternalIP names the interface that holds the node's InternalIP.
func (i *interfaces) ofInternalIP(node *corev1.Node) (string, error) {
	if node == nil {
		return "", errors.New("the node has no Node object")
	}
	var want []netip.Addr
	for _, a := range node.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
			want = append(want, ip)
		}
	}
	name := ""
	err := netns.Do(i.netns, func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			for _, w := range want {
				if ip.Unmap() == w {
					l, err := netlink.LinkByIndex(a.LinkIndex)
					if err != nil {
						return err
					}
					name = l.Attrs().Name
					return nil
				}
			}
		}
		return fmt.Errorf("no interface holds the InternalIP %v", want)
	})
	return name, err
}

// firstIPv4 is the first global IPv4 address of the node.
func (i *interfaces) firstIPv4() (netip.Addr, bool) {
	var out netip.Addr
	_ = netns.Do(i.netns, func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip.IsGlobalUnicast() {
				out = ip
				return nil
			}
		}
		return nil
	})
	return out, out.IsValid()
}
