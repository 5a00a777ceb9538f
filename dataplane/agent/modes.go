// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
)

var families = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}

// kube-proxy's modes that svcnet does not implement: naming one is an
// error at start-up, never a silent fall back to another mode.
const (
	modeIPVS        = "ipvs"
	modeKernelspace = "kernelspace"
)

// checkMode tells what is wrong with a mode, or nil; empty is kube-proxy's
// default on Linux, iptables.
func checkMode(mode string) (string, error) {
	switch mode {
	case "":
		return ModeIPTables, nil
	case ModeIPTables, ModeNFTables:
		return mode, nil
	case modeIPVS, modeKernelspace:
		return "", fmt.Errorf("%q is a kube-proxy mode that svcnet does not implement; use %s", mode, strings.Join(Modes, " or "))
	default:
		return "", fmt.Errorf("%q is not a proxy mode; valid modes: %s", mode, strings.Join(Modes, ", "))
	}
}

// kube-proxy's ways of telling traffic from local Pods (--detect-local-mode).
const (
	LocalModeClusterCIDR         = "ClusterCIDR"
	LocalModeNodeCIDR            = "NodeCIDR"
	LocalModeBridgeInterface     = "BridgeInterface"
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix"
)

// checkLocalMode tells whether svcnet implements a local traffic
// detection mode; empty is kube-proxy's default, ClusterCIDR.
func checkLocalMode(mode string) (string, error) {
	switch mode {
	case "":
		return LocalModeClusterCIDR, nil
	case LocalModeClusterCIDR, LocalModeNodeCIDR:
		return mode, nil
	case LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
		return "", fmt.Errorf("%q is a kube-proxy mode that svcnet does not implement (its rules match Pod traffic by source address); use %s or %s",
			mode, LocalModeClusterCIDR, LocalModeNodeCIDR)
	default:
		return "", fmt.Errorf("%q is not a local traffic detection mode; valid modes: %s, %s", mode, LocalModeClusterCIDR, LocalModeNodeCIDR)
	}
}

// newBackends builds the backends of cfg.Mode: IPv4, and IPv6 too when
// the node can program it. In iptables mode, a non-nil acct counts
// packets as kube-proxy does.
func newBackends(cfg Config, acct *nfacct.Client, log logr.Logger) ([]dataplane.Backend, error) {
	var variant iptables.Variant
	liberal := false
	if cfg.Mode == ModeIPTables {
		variant = detectVariant(cfg, log)
		liberal = conntrackTCPLiberal(procSysctl{root: "/proc/sys", netns: cfg.NetNS}, log)
	}
	ipv6Off := ipv6Disabled(procSysctl{root: "/proc/sys", netns: cfg.NetNS})
	var backends []dataplane.Backend
	for _, f := range families {
		if f == corev1.IPv6Protocol && ipv6Off != "" {
			log.Info("IPv6 rules disabled", "mode", cfg.Mode, "reason", ipv6Off)
			continue
		}
		b, err := newBackend(cfg, f, variant, liberal, acct)
		if err != nil && f == corev1.IPv6Protocol {
			log.Info("IPv6 rules disabled", "mode", cfg.Mode, "err", err.Error())
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s mode: %w", cfg.Mode, err)
		}
		backends = append(backends, b)
	}
	return backends, nil
}

// ipv6Disabled tells why the node's kernel has no IPv6 to proxy, as
// kube-proxy checks before it builds an IPv6 proxier: no IPv6 in the
// kernel (no net.ipv6 sysctls), or net.ipv6.conf.all.disable_ipv6 set.
// Empty when IPv6 is on. The tools' own support (ip6tables, nft's ip6
// family) is checked apart, by building the backend.
func ipv6Disabled(sys sysctl) string {
	v, err := sys.Get("net.ipv6.conf.all.disable_ipv6")
	switch {
	case err != nil:
		return "no kernel support for IPv6: " + err.Error()
	case v == 1:
		return "net.ipv6.conf.all.disable_ipv6 is set"
	}
	return ""
}

// conntrackTCPLiberal reads the node's nf_conntrack_tcp_be_liberal, as
// kube-proxy's iptables mode does at start (after --conntrack-tcp-be-
// liberal set it): when it is on, no INVALID drop rule is written.
func conntrackTCPLiberal(sys sysctl, log logr.Logger) bool {
	v, err := sys.Get("net.netfilter.nf_conntrack_tcp_be_liberal")
	if err != nil || v == 0 {
		return false
	}
	log.Info("nf_conntrack_tcp_be_liberal is set: no DROP rule for INVALID packets")
	return true
}

func newBackend(cfg Config, f corev1.IPFamily, variant iptables.Variant, liberal bool, acct *nfacct.Client) (dataplane.Backend, error) {
	cidrs := cfg.ClusterCIDRs[f]
	switch cfg.Mode {
	case ModeNFTables:
		nft, err := nftables.NewInterface(f, nftables.TableName, cfg.NetNS)
		if err != nil {
			return nil, err
		}
		return nftables.NewBackend(f, nft, nftables.Config{ClusterCIDRs: cidrs, MasqueradeAll: cfg.MasqueradeAll}), nil
	default:
		ipt := iptables.NewExecVariant(f, cfg.NetNS, variant)
		if f == corev1.IPv6Protocol {
			if _, err := ipt.Save(context.Background(), "filter"); err != nil {
				return nil, fmt.Errorf("ip6tables is not usable: %w", err)
			}
		}
		var opts []iptables.Option
		if acct != nil {
			opts = append(opts, iptables.WithAccounting(acct))
		}
		return iptables.NewBackend(f, ipt, iptables.Config{ClusterCIDRs: cidrs, MasqueradeAll: cfg.MasqueradeAll,
			NoLocalhostNodePorts: !cfg.LocalhostNodePorts, ConntrackTCPLiberal: liberal}, opts...), nil
	}
}

// removeOtherModes removes what kube-proxy and the other mode left on the
// node, once this mode's rules serve it: in nftables mode the iptables
// chains (svcnet's iptables mode and kube-proxy's share their names) and
// kube-proxy's nftables table, in iptables mode svcnet's and kube-proxy's
// nftables tables and the chains only kube-proxy's ipvs mode writes; in
// both, ipvs mode's kube-ipvs0 device. kube-proxy does the same on start
// for its other modes;
// the agent also removes kube-proxy's table of its own mode, whose stale
// rules would sit at the same hooks as the agent's. A node where the other
// program or mode is missing has nothing to remove; failures are logged,
// not fatal: the agent's own rules matter more.
func removeOtherModes(ctx context.Context, cfg Config, log logr.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	variant := detectVariant(cfg, log)
	for _, f := range families {
		ipt := iptables.NewExecVariant(f, cfg.NetNS, variant)
		cleanup, what := iptables.CleanupIPVS, "kube-proxy's ipvs mode's iptables chains"
		if cfg.Mode == ModeNFTables {
			cleanup, what = iptables.Cleanup, "the iptables chains"
		}
		if err := cleanup(ctx, ipt); err != nil {
			log.V(1).Info("Could not remove "+what, "family", f, "err", err.Error())
		}
		tables := []string{nftables.KubeProxyTableName}
		if cfg.Mode != ModeNFTables {
			tables = append(tables, nftables.TableName)
		}
		if err := removeTables(ctx, log, f, cfg.NetNS, tables...); err != nil {
			log.V(1).Info("Could not remove the nftables tables", "tables", tables, "family", f, "err", err.Error())
		}
	}
	removeIPVSDeviceLogged(cfg.NetNS, log)
}

// removeTables deletes those of tables that exist, logging each. The kernel is asked
// first which do: a knftables interface runs nft several times before a
// table can be deleted, and each run reads the ruleset, which in iptables
// mode holds every iptables-nft rule (docs/BENCHMARKS.md).
func removeTables(ctx context.Context, log logr.Logger, f corev1.IPFamily, netns string, tables ...string) error {
	present, err := nftables.Tables(f, netns)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if !slices.Contains(present, t) {
			continue
		}
		nft, err := nftables.NewInterface(f, t, netns)
		if err != nil {
			return err
		}
		if err := nftables.Cleanup(ctx, nft); err != nil {
			return fmt.Errorf("table %s: %w", t, err)
		}
		log.Info("Removed a table left on the node", "table", t, "family", f)
	}
	return nil
}

// Cleanup removes every mode's rules from the node, whatever cfg.Mode
// says, as kube-proxy's --cleanup does: the iptables chains (svcnet's
// iptables mode and kube-proxy's share their names) and svcnet's and
// kube-proxy's nftables tables, in each IP family. A family or tool the
// node does not have has nothing to remove and is skipped, said in the log.
func Cleanup(ctx context.Context, cfg Config, log logr.Logger) error {
	cfg.LogIgnored(log)
	var errs []error
	variant := detectVariant(cfg, log)
	for _, f := range families {
		if err := cleanupIPTables(ctx, f, cfg.NetNS, variant, log); err != nil {
			errs = append(errs, err)
		}
		if err := cleanupNFTables(ctx, f, cfg.NetNS, log); err != nil {
			errs = append(errs, err)
		}
	}
	removeIPVSDeviceLogged(cfg.NetNS, log)
	return errors.Join(errs...)
}

func cleanupIPTables(ctx context.Context, f corev1.IPFamily, netns string, variant iptables.Variant, log logr.Logger) error {
	ipt := iptables.NewExecVariant(f, netns, variant)
	if _, err := ipt.Save(ctx, "filter"); err != nil {
		log.Info("Skipped iptables cleanup: iptables is not usable", "family", f, "err", err.Error())
		return nil
	}
	if err := iptables.Cleanup(ctx, ipt); err != nil {
		return fmt.Errorf("removing %s iptables rules: %w", f, err)
	}
	log.Info("Removed rules", "mode", ModeIPTables, "family", f)
	return nil
}

func cleanupNFTables(ctx context.Context, f corev1.IPFamily, netns string, log logr.Logger) error {
	if _, err := nftables.Tables(f, netns); err != nil {
		log.Info("Skipped nftables cleanup: nftables is not usable", "family", f, "err", err.Error())
		return nil
	}
	if err := removeTables(ctx, log, f, netns, nftables.TableName, nftables.KubeProxyTableName); err != nil {
		return fmt.Errorf("removing %s nftables tables: %w", f, err)
	}
	log.Info("Removed rules", "mode", ModeNFTables, "family", f, "tables", []string{nftables.TableName, nftables.KubeProxyTableName})
	return nil
}

// detectVariant picks iptables-nft or iptables-legacy for this node, as
// kube-proxy's image wrapper does (iptables.DetectVariant), and says
// which and why: rules written with the other variant would sit beside
// the node's own, unseen by them.
func detectVariant(cfg Config, log logr.Logger) iptables.Variant {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := iptables.DetectVariant(ctx, cfg.NetNS)
	log.Info("Using iptables-"+string(d.Variant), "reason", d.Reason, "nftRules", d.NFTRules, "legacyRules", d.LegacyRules)
	return d.Variant
}

// routeLocalnet is the sysctl that lets the kernel route packets for
// 127.0.0.0/8 that were DNATed elsewhere: localhost NodePorts need it.
const routeLocalnet = "/proc/sys/net/ipv4/conf/all/route_localnet"

// enableRouteLocalnet sets route_localnet=1 in the node's network
// namespace (cfg.NetNS, or the agent's own), as kube-proxy does when
// localhost NodePorts are on; the KUBE-FIREWALL rule the iptables backend
// writes closes the hole it opens (kubernetes issue 90259).
func enableRouteLocalnet(cfg Config, log logr.Logger) error {
	return netns.Do(cfg.NetNS, func() error {
		cur, err := os.ReadFile(routeLocalnet)
		if err != nil {
			return fmt.Errorf("reading %s: %w", routeLocalnet, err)
		}
		if strings.TrimSpace(string(cur)) == "1" {
			return nil
		}
		log.Info("Setting route_localnet=1 to allow node-ports on localhost; to change this either disable --iptables-localhost-nodeports or set --nodeport-addresses to filter loopback addresses")
		if err := os.WriteFile(routeLocalnet, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("setting %s to 1 for localhost NodePorts: %w", routeLocalnet, err)
		}
		return nil
	})
}
