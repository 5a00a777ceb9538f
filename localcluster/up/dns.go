// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"context"
	"fmt"
	"net/netip"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/addons"
)

// installDNS applies the cluster DNS add-on (localcluster/addons) and
// points the namespaces' `ip netns exec` resolver at it.
func (cl *cluster) installDNS(ctx context.Context, c client.Client, ip netip.Addr) error {
	if err := addons.InstallCoreDNS(ctx, c, ip); err != nil {
		return err
	}
	// Outside the Pods, names resolve as from a Pod of the default
	// namespace.
	resolv := addons.ResolvConf(ip)
	for _, ns := range append([]string{cl.client}, cl.nodeNamespaces()...) {
		if err := cl.lab.SetResolvConf(ns, resolv); err != nil {
			return fmt.Errorf("writing the resolver file of %s: %w", ns, err)
		}
	}
	return nil
}

func (cl *cluster) nodeNamespaces() []string {
	var out []string
	for _, n := range cl.nodes {
		out = append(out, n.Net.NetNS)
	}
	return out
}
