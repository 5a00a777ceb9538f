// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcnet-io/svcnet/internal/kubeadm"
)

// getConfigz asks the metrics address's /configz and decodes it as
// kube-proxy's answer: the configuration under its group's name.
func getConfigz(t *testing.T, cfg Config) v1alpha1.KubeProxyConfiguration {
	t.Helper()
	rec := httptest.NewRecorder()
	metricsHandler(cfg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/configz", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/configz = %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	var body map[string]v1alpha1.KubeProxyConfiguration
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body) != 1 {
		t.Fatalf("/configz body %q: %v; want one key", rec.Body.String(), err)
	}
	c, ok := body["kubeproxy.config.k8s.io"]
	if !ok {
		t.Fatalf("/configz body %q has no kubeproxy.config.k8s.io", rec.Body.String())
	}
	if c.APIVersion != "kubeproxy.config.k8s.io/v1alpha1" || c.Kind != "KubeProxyConfiguration" {
		t.Errorf("/configz apiVersion %q kind %q", c.APIVersion, c.Kind)
	}
	return c
}

// TestConfigzServesTheFileInEffect runs the agent from kubeadm's
// kube-proxy file and expects /configz to hold what kube-proxy's holds
// for it: the file with kube-proxy's defaults, the node name, and (as
// kube-proxy's conversion back from its internal form writes them) the
// sync periods of the other modes empty.
func TestConfigzServesTheFileInEffect(t *testing.T) {
	file, err := kubeadm.KubeProxyConfig(map[string]any{"conntrack.maxPerCore": 0, "iptables.minSyncPeriod": "2s", "clusterCIDR": "10.244.0.0/16,fd00:10:244::/56"})
	must(t, err)
	path := filepath.Join(t.TempDir(), "config.conf")
	must(t, os.WriteFile(path, file, 0o600))
	cfg, err := completeFlags("--config="+path, "--hostname-override=Node-A")
	must(t, err)
	want, _, err := loadKubeProxyConfiguration(path)
	must(t, err)
	want.HostnameOverride = "node-a"
	want.Mode, want.DetectLocalMode = ModeIPTables, LocalModeClusterCIDR
	want.NFTables.SyncPeriod, want.NFTables.MinSyncPeriod, want.IPVS.SyncPeriod = metav1.Duration{}, metav1.Duration{}, metav1.Duration{}
	got := getConfigz(t, cfg)
	// Settings svcnet does not act on show kube-proxy's defaults, not the
	// file's (TestIgnoredSettingsAreNamed: the agent names them instead).
	ignored := cmpopts.IgnoreFields(v1alpha1.KubeProxyConfiguration{}, "FeatureGates", "EnableProfiling", "ShowHiddenMetricsForVersion",
		"IPVS", "Winkernel", "DetectLocal", "ConfigSyncPeriod", "PortRange", "WindowsRunAsService")
	if diff := cmp.Diff(*want, got, ignored, cmpopts.IgnoreFields(v1alpha1.KubeProxyConfiguration{}, "ClientConnection.ContentType", "ClientConnection.AcceptContentTypes", "Logging")); diff != "" {
		t.Errorf("/configz (-kube-proxy's +agent's):\n%s", diff)
	}
}

// TestConfigzFollowsFlags: without a file, the flags in effect.
func TestConfigzFollowsFlags(t *testing.T) {
	cfg, err := completeFlags("--hostname-override=node-b", "--proxy-mode=nftables", "--cluster-cidr=10.244.0.0/16", "--min-sync-period=3s", "--masquerade-all", "--metrics-bind-address=127.0.0.1:9999")
	must(t, err)
	got := getConfigz(t, cfg)
	for name, tc := range map[string]struct{ got, want any }{
		"mode":                   {got.Mode, v1alpha1.ProxyMode(ModeNFTables)},
		"hostnameOverride":       {got.HostnameOverride, "node-b"},
		"clusterCIDR":            {got.ClusterCIDR, "10.244.0.0/16"},
		"nftables.minSyncPeriod": {got.NFTables.MinSyncPeriod.Duration.String(), "3s"},
		"nftables.syncPeriod":    {got.NFTables.SyncPeriod.Duration.String(), "30s"},
		"nftables.masqueradeAll": {got.NFTables.MasqueradeAll, true},
		"iptables.syncPeriod":    {got.IPTables.SyncPeriod.Duration.String(), "0s"},
		"nodePortAddresses":      {got.NodePortAddresses, []string{"primary"}},
		"metricsBindAddress":     {got.MetricsBindAddress, "127.0.0.1:9999"},
		"detectLocalMode":        {got.DetectLocalMode, v1alpha1.LocalMode(LocalModeClusterCIDR)},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("/configz %s (-want +got):\n%s", name, diff)
		}
	}
}
