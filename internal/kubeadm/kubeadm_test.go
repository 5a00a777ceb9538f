// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kubeadm

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestKubeProxyConfig(t *testing.T) {
	out, err := KubeProxyConfig(map[string]any{"mode": "nftables", "conntrack.maxPerCore": 0, "conntrack.min": nil})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Kind      string
		Mode      string
		Conntrack struct {
			MaxPerCore *int32
			Min        *int32
		}
		ClusterCIDR string
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Kind != "KubeProxyConfiguration" || doc.Mode != "nftables" || doc.Conntrack.MaxPerCore == nil || *doc.Conntrack.MaxPerCore != 0 ||
		doc.Conntrack.Min != nil || doc.ClusterCIDR != "10.244.0.0/16" {
		t.Errorf("changed config:\n%s", out)
	}
	if _, err := KubeProxyConfig(map[string]any{"conntrack.maxPerCores": 0}); err == nil || !strings.Contains(err.Error(), "conntrack.maxPerCores") {
		t.Errorf("a misspelt field: %v", err)
	}
}
