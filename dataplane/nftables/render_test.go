// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/internal/goldencases"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// TestRenderGolden renders every feature's case through a full sync into
// knftables' fake and compares the table with testdata/<case>.golden.
func TestRenderGolden(t *testing.T) {
	for name, tc := range goldencases.Cases() {
		t.Run(name, func(t *testing.T) {
			fam := familyOf(tc.Family)
			fake := knftables.NewFake(fam.nft, TableName)
			b := NewBackend(tc.Family, fake, Config{ClusterCIDRs: tc.ClusterCIDRs, MasqueradeAll: tc.MasqueradeAll})
			m := tc.Model()
			byService := map[types.NamespacedName][]int{}
			for i, p := range m.Ports {
				svc := types.NamespacedName{Namespace: p.Namespace, Name: p.Service}
				byService[svc] = append(byService[svc], i)
			}
			for key, idx := range byService {
				ports := make([]*model.ServicePort, 0, len(idx))
				for _, i := range idx {
					ports = append(ports, m.Ports[i])
				}
				b.SetService(key, ports)
			}
			if _, err := b.Sync(context.Background(), dataplane.Node{NodePortIPs: tc.NodePortIPs, ServiceCIDRs: tc.ServiceCIDRs}); err != nil {
				t.Fatal(err)
			}
			goldencases.Check(t, name, fake.Dump(), "dataplane/nftables")
		})
	}
}
