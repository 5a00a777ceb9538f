// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"fmt"

	gnft "github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Cleanup deletes a table (svcnet's, or kube-proxy's when a node leaves
// kube-proxy's nftables mode) if it is there; nothing else is touched.
func Cleanup(ctx context.Context, nft knftables.Interface) error {
	if _, err := nft.List(ctx, "chains"); err != nil {
		if knftables.IsNotFound(err) {
			return nil
		}
		return err
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting the table: %w", err)
	}
	return nil
}

// Tables returns the names of a family's nftables tables in the network
// namespace at netnsPath ("" for the caller's). It asks the kernel over
// netlink for the tables alone: every nft command first reads much of the
// ruleset, which on a node in iptables mode (iptables-nft keeps its rules
// in nf_tables too) makes even `nft list tables` take seconds.
func Tables(f corev1.IPFamily, netnsPath string) ([]string, error) {
	fam := gnft.TableFamilyIPv4
	if f == corev1.IPv6Protocol {
		fam = gnft.TableFamilyIPv6
	}
	var tables []*gnft.Table
	// The connection's socket is opened inside Do, so it belongs to the
	// namespace.
	err := netns.Do(netnsPath, func() error {
		conn, err := gnft.New()
		if err != nil {
			return err
		}
		tables, err = conn.ListTablesOfFamily(fam)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s nftables tables: %w", familyOf(f).nft, err)
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	return names, nil
}
