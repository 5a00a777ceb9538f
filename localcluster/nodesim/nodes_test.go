// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestNodeObjectZone checks that a node in a zone is labelled with it
// (and the region), and that a node in none carries neither label, as
// kind's nodes, so that topology tests see the zones svcnet up was asked
// for and no others.
func TestNodeObjectZone(t *testing.T) {
	net := &netlab.Node{PodCIDR: netip.MustParsePrefix("10.244.1.0/24")}
	zoned := nodeObject(Node{Name: "node-1", Zone: "zone-b", Net: net})
	if got := zoned.Labels[corev1.LabelTopologyZone]; got != "zone-b" {
		t.Errorf("zone label: got %q, want zone-b", got)
	}
	if _, ok := zoned.Labels[corev1.LabelTopologyRegion]; !ok {
		t.Errorf("a zoned node has no region label: %v", zoned.Labels)
	}
	plain := nodeObject(Node{Name: "node-1", Net: net})
	for _, l := range []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion} {
		if v, ok := plain.Labels[l]; ok {
			t.Errorf("a node in no zone is labelled %s=%q", l, v)
		}
	}
	if plain.Labels[corev1.LabelHostname] != "node-1" {
		t.Errorf("hostname label: %v", plain.Labels)
	}
}
