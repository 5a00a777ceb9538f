package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

var families = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}

// newBackends builds the backends of cfg.Mode: IPv4, and IPv6 too when
// the node can program it.
func newBackends(cfg Config, log logr.Logger) ([]dataplane.Backend, error) {
	var backends []dataplane.Backend
	for _, f := range families {
		b, err := newBackend(cfg, f)
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

func newBackend(cfg Config, f corev1.IPFamily) (dataplane.Backend, error) {
	cidrs := cfg.ClusterCIDRs[f]
	switch cfg.Mode {
	case ModeNFTables:
		nft, err := nftables.NewInterface(f, nftables.TableName, cfg.NetNS)
		if err != nil {
			return nil, err
		}
		return nftables.NewBackend(f, nft, nftables.Config{ClusterCIDRs: cidrs, MasqueradeAll: cfg.MasqueradeAll}), nil
	default:
		ipt := iptables.NewExec(f, cfg.NetNS)
		if f == corev1.IPv6Protocol {
			if _, err := ipt.Save(context.Background(), "filter"); err != nil {
				return nil, fmt.Errorf("ip6tables is not usable: %w", err)
			}
		}
		return iptables.NewBackend(f, ipt, iptables.Config{ClusterCIDRs: cidrs, MasqueradeAll: cfg.MasqueradeAll}), nil
	}
}

// removeOtherModes removes what the other mode left on the node, as
// kube-proxy does on start: in nftables mode the iptables chains (svcnet's
// iptables mode and kube-proxy's share their names), in iptables mode
// svcnet's and kube-proxy's nftables tables. A node where the other
// program or mode is missing has nothing to remove; failures are logged,
// not fatal: the agent's own rules matter more.
func removeOtherModes(ctx context.Context, cfg Config, log logr.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, f := range families {
		var err error
		var what string
		switch cfg.Mode {
		case ModeNFTables:
			what = "iptables chains"
			err = iptables.Cleanup(ctx, iptables.NewExec(f, cfg.NetNS))
		default:
			what = "nftables tables"
			err = removeTables(ctx, f, cfg.NetNS, nftables.TableName, nftables.KubeProxyTableName)
		}
		if err != nil {
			log.V(1).Info("Could not remove the other mode's rules", "what", what, "family", f, "err", err.Error())
		}
	}
}

// removeTables deletes those of tables that exist. The kernel is asked
// first which do: a knftables interface runs nft several times before a
// table can be deleted, and each run reads the ruleset, which in iptables
// mode holds every iptables-nft rule (docs/BENCHMARKS.md).
func removeTables(ctx context.Context, f corev1.IPFamily, netns string, tables ...string) error {
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
	}
	return nil
}
