// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
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
