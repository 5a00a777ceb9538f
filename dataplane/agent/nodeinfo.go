// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// kube-proxy's keywords of --nodeport-addresses.
const (
	NodePortAddressesPrimary   = "primary"
	NodePortAddressesLocalhost = "localhost"
	NodePortAddressesAll       = "all"
)

// How long the agent waits at start for what it reads of its Node, as
// kube-proxy's NodeManager: its addresses (then it goes on without them),
// its podCIDRs with --detect-local-mode=NodeCIDR (then it fails).
const (
	nodeIPsTimeout  = 30 * time.Second
	podCIDRsTimeout = 5 * time.Minute
	nodePollPeriod  = time.Second
)

// nodePorts is --nodeport-addresses completed.
type nodePorts struct {
	cidrs   []netip.Prefix
	primary bool
}

// nodePortAddresses expands kube-proxy's keywords: localhost and all into
// their ranges now, primary into a flag the Node's addresses satisfy at
// start. Unset, it is all in iptables mode and primary in nftables mode, as
// kube-proxy defaults it. all in both families is every local address,
// the same as unset in iptables mode.
func (o *Options) nodePortAddresses(mode string) (nodePorts, error) {
	words := o.NodePortAddresses
	if len(slices.DeleteFunc(slices.Clone(words), func(s string) bool { return strings.TrimSpace(s) == "" })) == 0 && mode == ModeNFTables {
		words = []string{NodePortAddressesPrimary}
	}
	var out nodePorts
	var cidrs []string
	for _, w := range words {
		switch strings.TrimSpace(w) {
		case NodePortAddressesPrimary:
			out.primary = true
		case NodePortAddressesLocalhost:
			cidrs = append(cidrs, "127.0.0.0/8", "::1/128")
		case NodePortAddressesAll:
			cidrs = append(cidrs, "0.0.0.0/0", "::/0")
		default:
			cidrs = append(cidrs, w)
		}
	}
	var err error
	out.cidrs, err = parsePrefixes(o.name("nodeport-addresses", "nodePortAddresses"), cidrs)
	if err != nil {
		return nodePorts{}, fmt.Errorf("%w (CIDRs or the keywords %s, %s, %s)", err, NodePortAddressesPrimary, NodePortAddressesLocalhost, NodePortAddressesAll)
	}
	if slices.Contains(out.cidrs, netip.MustParsePrefix("0.0.0.0/0")) && slices.Contains(out.cidrs, netip.MustParsePrefix("::/0")) {
		out = nodePorts{}
	}
	return out, nil
}

// completeFromNode fills in what cfg takes from this node's Node object,
// waiting for it as kube-proxy does at start: the primary IPs for
// --nodeport-addresses=primary (--bind-address first), the podCIDRs for
// --detect-local-mode=NodeCIDR.
func completeFromNode(ctx context.Context, c client.Reader, cfg Config, log logr.Logger) (Config, error) {
	if !cfg.NodePortPrimary && !cfg.DetectLocalFromNode {
		return cfg, nil
	}
	node, err := waitForNode(ctx, c, cfg.NodeName, nodeIPsTimeout, func(n *corev1.Node) bool { return len(nodeIPs(n)) > 0 })
	if err != nil {
		return cfg, err
	}
	if cfg.NodePortPrimary {
		cfg.NodePortAddresses = primaryNodePortAddresses(cfg, node, log)
		cfg.NodePortPrimary = false
	}
	if cfg.DetectLocalFromNode {
		if cfg.ClusterCIDRs, err = nodePodCIDRs(ctx, c, cfg.NodeName, node); err != nil {
			return cfg, err
		}
		log.Info("Detecting local traffic by the Node's podCIDRs", "node", cfg.NodeName, "podCIDRs", node.Spec.PodCIDRs)
	}
	return cfg, nil
}

// primaryIPs are the node's primary IPs as kube-proxy's detectNodeIPs
// takes them: --bind-address for its family when it is set, the Node's
// (nodeIPs) for the rest. NodePorts on "primary" and the node's own
// traffic through loadBalancerSourceRanges (allowFromNode) both use them.
func primaryIPs(node *corev1.Node, bindAddress netip.Addr) []netip.Addr {
	ips := nodeIPs(node)
	if !bindAddress.IsValid() {
		return ips
	}
	return append([]netip.Addr{bindAddress}, slices.DeleteFunc(ips, func(ip netip.Addr) bool {
		return ipfamily.Of(ip) == ipfamily.Of(bindAddress)
	})...)
}

// primaryNodePortAddresses expands primary: a /32 or /128 per family of
// the Node's primary IPs, none for a family whose IP is unknown or
// loopback, as kube-proxy expands it.
func primaryNodePortAddresses(cfg Config, node *corev1.Node, log logr.Logger) []netip.Prefix {
	ips := primaryIPs(node, cfg.BindAddress)
	out := slices.Clone(cfg.NodePortAddresses)
	primary := 0
	for _, ip := range ips {
		if !ip.IsLoopback() {
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			primary++
		}
	}
	if primary == 0 {
		log.Info("The Node has no IP: primary adds no address to --nodeport-addresses (none left: every local address), as in kube-proxy", "node", cfg.NodeName)
		return cfg.NodePortAddresses
	}
	log.Info("NodePorts accepted on the Node's primary IPs", "node", cfg.NodeName, "addresses", out)
	return out
}

// nodePodCIDRs reads the Node's podCIDRs by family, waiting for them to
// be allocated as kube-proxy does, and failing after that as it does.
func nodePodCIDRs(ctx context.Context, c client.Reader, name string, node *corev1.Node) (map[corev1.IPFamily][]netip.Prefix, error) {
	if node == nil || len(node.Spec.PodCIDRs) == 0 {
		var err error
		node, err = waitForNode(ctx, c, name, podCIDRsTimeout, func(n *corev1.Node) bool { return len(n.Spec.PodCIDRs) > 0 })
		if err != nil {
			return nil, err
		}
	}
	if node == nil {
		return nil, fmt.Errorf("--detect-local-mode=%s: timed out waiting for Node %s to exist", LocalModeNodeCIDR, name)
	}
	if len(node.Spec.PodCIDRs) == 0 {
		return nil, fmt.Errorf("--detect-local-mode=%s: timed out waiting for a podCIDR on Node %s", LocalModeNodeCIDR, name)
	}
	prefixes, err := parsePrefixes("Node "+name+" spec.podCIDRs", node.Spec.PodCIDRs)
	if err != nil {
		return nil, err
	}
	out := map[corev1.IPFamily][]netip.Prefix{}
	for _, p := range prefixes {
		out[ipfamily.OfPrefix(p)] = append(out[ipfamily.OfPrefix(p)], p)
	}
	return out, nil
}

// waitForNode reads the Node until done says it has what is needed or
// timeout passes; it returns the last Node read (nil if none exists).
// Only ctx ending or an error other than NotFound fails it.
func waitForNode(ctx context.Context, c client.Reader, name string, timeout time.Duration, done func(*corev1.Node) bool) (*corev1.Node, error) {
	var last *corev1.Node
	var readErr error
	pollCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(pollCtx, nodePollPeriod, true, func(ctx context.Context) (bool, error) {
		var n corev1.Node
		switch err := c.Get(ctx, client.ObjectKey{Name: name}, &n); {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			readErr = err
			return false, nil
		}
		last, readErr = &n, nil
		return done(&n), nil
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	if last == nil && readErr != nil {
		return nil, fmt.Errorf("reading Node %s: %w", name, readErr)
	}
	return last, nil
}
