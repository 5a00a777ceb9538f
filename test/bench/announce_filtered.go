// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strings"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// dropHeartbeatFrames makes the fabric's bridge drop the L2 heartbeat
// frames (EtherType 0x88B5), as OpenStack port security or a virtual
// switch passing only IP and ARP does: the agents hear each other by the
// UDP path alone (issue #47).
func (c *annCluster) dropHeartbeatFrames() error {
	for _, cmd := range []string{
		"add table bridge svcnet_bench",
		"add chain bridge svcnet_bench forward { type filter hook forward priority 0 ; }",
		"add rule bridge svcnet_bench forward ether type 0x88b5 drop",
	} {
		if _, err := c.lab.Run(c.lab.Fabric(), "nft", cmd); err != nil {
			return fmt.Errorf("dropping the heartbeat frames: %w", err)
		}
	}
	return nil
}

// annFramesDroppedRow is the L2 link-cut row on a segment that drops the
// heartbeat frames.
func annFramesDroppedRow(ctx context.Context, root string, tries int, b *strings.Builder) error {
	name := fmt.Sprintf("%s, %s, heartbeat frames dropped (UDP path), link cut", annBySvcnet, svcnetv1alpha1.AnnouncementModeL2)
	c, err := startAnnCluster(ctx, root, svcnetv1alpha1.AnnouncementModeL2, annBySvcnet)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return fmt.Errorf("(o) %s: %w", name, err)
	}
	if err := c.dropHeartbeatFrames(); err != nil {
		return fmt.Errorf("(o) %s: %w", name, err)
	}
	res, err := runAnnScenario(ctx, c, "link", tries)
	if err != nil {
		return fmt.Errorf("(o) %s: %w", name, err)
	}
	res.name = name
	writeAnnRow(b, res)
	return nil
}
