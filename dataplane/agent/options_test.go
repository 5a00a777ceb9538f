// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/internal/kubeadm"
	"github.com/svcnet-io/svcnet/internal/lbclass"
)

func TestGCPercentFor(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	if got, ok := GCPercentFor(env(nil)); !ok || got != GCPercent {
		t.Errorf("without GOGC: %d, %v; want %d, true", got, ok, GCPercent)
	}
	if _, ok := GCPercentFor(env(map[string]string{"GOGC": "100"})); ok {
		t.Error("with GOGC set, the agent must leave the collector as GOGC says")
	}
}

// completeFlags parses flags into the default options and completes them.
func completeFlags(flags ...string) (Config, error) {
	opts := DefaultOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	opts.AddFlags(fs)
	// -v is the command's (klog's); the tests see whether it was given.
	fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(flags); err != nil {
		return Config{}, err
	}
	return opts.Complete()
}

var cmpConfig = []cmp.Option{
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmpopts.EquateEmpty(),
	// TestConfigz checks it.
	cmpopts.IgnoreFields(Config{}, "KubeProxyConfiguration"),
}

// kubeProxyDefaults is what kube-proxy's defaults complete to, on a node
// named node-a, as both kubeadm's and kind's files leave them.
func kubeProxyDefaults() Config {
	zero := 0
	return Config{
		NodeName:           "node-a",
		Mode:               ModeIPTables,
		ClusterCIDRs:       map[corev1.IPFamily][]netip.Prefix{corev1.IPv4Protocol: {netip.MustParsePrefix("10.244.0.0/16")}},
		SyncPeriod:         30 * time.Second,
		MinSyncPeriod:      time.Second,
		HealthTimeout:      time.Minute,
		Conntrack:          ConntrackConfig{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour},
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		PprofBindAddress:   "0",
		API:                APIOptions{BindAddress: "0.0.0.0:10266"},
		Announce:           announce.DefaultOptions(),
		Client:             ClientConfig{Kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf", QPS: 5, Burst: 10},
		OOMScoreAdj:        -999,
		LogVerbosity:       &zero,
		// iptables mode, every address: kube-proxy accepts NodePorts on
		// 127.0.0.0/8 there (iptables.localhostNodePorts defaults to true).
		LocalhostNodePorts: true,
	}
}

// TestKubeProxyConfigFiles loads the files kubeadm and kind write into
// kube-proxy's ConfigMap, the way their DaemonSets pass them, and checks
// that they complete to kube-proxy's settings with nothing ignored.
func TestKubeProxyConfigFiles(t *testing.T) {
	kind := kubeProxyDefaults()
	kind.Conntrack.MaxPerCore = 0
	for name, tc := range map[string]struct {
		changes map[string]any
		want    Config
	}{
		"kubeadm": {want: kubeProxyDefaults()},
		// kind's KubeProxyConfiguration patch over kubeadm's file: the
		// global nf_conntrack_max stays alone, a minimum sync period of 1s.
		"kind": {changes: map[string]any{"conntrack.maxPerCore": 0, "iptables.minSyncPeriod": "1s"}, want: kind},
	} {
		t.Run(name, func(t *testing.T) {
			file, err := kubeadm.KubeProxyConfig(tc.changes)
			if err != nil {
				t.Fatal(err)
			}
			config := filepath.Join(t.TempDir(), "config.conf")
			if err := os.WriteFile(config, file, 0o600); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			got, err := completeFlags("--config="+config, "--hostname-override=Node-A")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpConfig...); diff != "" {
				t.Errorf("Complete (-want +got):\n%s", diff)
			}
		})
	}
}

// writeConfig writes a KubeProxyConfiguration of the given fields.
func writeConfig(t *testing.T, fields string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.conf")
	data := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + fields
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileOverFlags checks kube-proxy's precedence: the file's
// settings replace the flags' (which a warning names), except
// --hostname-override, -v and svcnet's own flags.
func TestConfigFileOverFlags(t *testing.T) {
	file := writeConfig(t, `hostnameOverride: From-File
mode: nftables
clusterCIDR: 10.1.0.0/16,fd00:1::/56
nftables:
  syncPeriod: 10s
  minSyncPeriod: 2s
  masqueradeAll: true
iptables:
  syncPeriod: 99s
  masqueradeAll: false
conntrack:
  maxPerCore: 0
  tcpBeLiberal: true
  udpTimeout: 45s
  udpStreamTimeout: 150s
nodePortAddresses: [localhost, 192.168.0.0/16]
healthzBindAddress: 127.0.0.1
logging:
  verbosity: 4
`)
	got, err := completeFlags("--config="+file, "--proxy-mode=iptables", "--iptables-sync-period=5s", "--cluster-cidr=10.9.0.0/16",
		"--proxy-name=svcnet", "--pprof-bind-address=127.0.0.1:6060")
	if err != nil {
		t.Fatal(err)
	}
	four := 4
	want := Config{
		NodeName: "from-file",
		Mode:     ModeNFTables,
		ClusterCIDRs: map[corev1.IPFamily][]netip.Prefix{
			corev1.IPv4Protocol: {netip.MustParsePrefix("10.1.0.0/16")},
			corev1.IPv6Protocol: {netip.MustParsePrefix("fd00:1::/56")},
		},
		MasqueradeAll: true,
		NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
			netip.MustParsePrefix("192.168.0.0/16")},
		ProxyName:     "svcnet",
		SyncPeriod:    10 * time.Second,
		MinSyncPeriod: 2 * time.Second,
		HealthTimeout: 20 * time.Second,
		Conntrack: ConntrackConfig{Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour,
			TCPBeLiberal: true, UDPTimeout: 45 * time.Second, UDPStreamTimeout: 150 * time.Second},
		HealthzBindAddress: "127.0.0.1:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		PprofBindAddress:   "127.0.0.1:6060",
		API:                APIOptions{BindAddress: "0.0.0.0:10266"},
		Announce:           announce.DefaultOptions(),
		Client:             ClientConfig{QPS: 5, Burst: 10},
		OOMScoreAdj:        -999,
		LogVerbosity:       &four,
		Ignored:            []string{"--cluster-cidr --iptables-sync-period --proxy-mode (--config is set: its settings replace these flags', as in kube-proxy)"},
	}
	if diff := cmp.Diff(want, got, cmpConfig...); diff != "" {
		t.Errorf("Complete (-want +got):\n%s", diff)
	}

	got, err = completeFlags("--config="+file, "--hostname-override=node-b", "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "node-b" || got.LogVerbosity != nil {
		t.Errorf("--hostname-override and -v must win over the file: node %q, verbosity from the file %v", got.NodeName, got.LogVerbosity)
	}
}

// TestCompleteTypesEveryFlagOnce checks that Complete turns the flags into
// the values the agent uses, so the sync path has nothing left to parse;
// kube-proxy's flag names and svcnet's older ones set the same settings.
func TestCompleteTypesEveryFlagOnce(t *testing.T) {
	for name, flags := range map[string][]string{
		"svcnet's names": {"--node-name=node-a", "--mode=nftables", "--sync-period=10s", "--min-sync-period=1s"},
		"kube-proxy's names": {"--hostname-override=node-a", "--proxy-mode=nftables", "--iptables-sync-period=10s",
			"--iptables-min-sync-period=1s"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := completeFlags(append(flags,
				"--cluster-cidr=10.244.0.0/16, fd00:10:244::/56", "--nodeport-addresses=192.168.1.7/24,::1/128",
				"--healthz-bind-address=", "--metrics-bind-address=127.0.0.1:10249", "--bind-address=192.168.1.7",
				"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=1h", "--conntrack-tcp-be-liberal",
				"--conntrack-udp-timeout=30s", "--kube-api-qps=50", "--kubeconfig=/k", "--master=https://10.0.0.1:6443",
				"--oom-score-adj=-500", "--detect-local-mode=NodeCIDR",
				"--announce-heartbeat-interval=200ms", "--announce-dead-after=1s", "--announce-liveness-port=7000",
				"--load-balancer-class=corp.example/lb", "--load-balancer-class-only",
				"--api-bind-address=0.0.0.0:10300", "--api-tls-cert-file=/c", "--api-tls-private-key-file=/k", "--api-client-ca-file=/ca")...)
			if err != nil {
				t.Fatal(err)
			}
			want := Config{
				NodeName: "node-a",
				Mode:     ModeNFTables,
				ClusterCIDRs: map[corev1.IPFamily][]netip.Prefix{
					corev1.IPv4Protocol: {netip.MustParsePrefix("10.244.0.0/16")},
					corev1.IPv6Protocol: {netip.MustParsePrefix("fd00:10:244::/56")},
				},
				DetectLocalFromNode: true,
				// Masked, as the sync path compares addresses with them.
				NodePortAddresses:  []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("::1/128")},
				BindAddress:        netip.MustParseAddr("192.168.1.7"),
				SyncPeriod:         10 * time.Second,
				MinSyncPeriod:      time.Second,
				HealthTimeout:      20 * time.Second,
				Conntrack:          ConntrackConfig{Min: 131072, TCPEstablishedTimeout: time.Hour, TCPCloseWaitTimeout: time.Hour, TCPBeLiberal: true, UDPTimeout: 30 * time.Second},
				HealthzBindAddress: "0",
				MetricsBindAddress: "127.0.0.1:10249",
				PprofBindAddress:   "0",
				API:                APIOptions{BindAddress: "0.0.0.0:10300", TLSCertFile: "/c", TLSKeyFile: "/k", ClientCAFile: "/ca"},
				Announce: announce.Options{Enabled: true, HeartbeatInterval: 200 * time.Millisecond, DeadAfter: time.Second, LivenessPort: 7000,
					Serve: lbclass.Selection{Class: "corp.example/lb", Only: true}, SecretNamespace: announce.DefaultOptions().SecretNamespace},
				Client:      ClientConfig{Kubeconfig: "/k", Master: "https://10.0.0.1:6443", QPS: 50},
				OOMScoreAdj: -500,
			}
			if diff := cmp.Diff(want, got, cmpConfig...); diff != "" {
				t.Errorf("Complete (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodePortAddresses checks kube-proxy's keywords and its defaults by
// mode: all in iptables mode, primary in nftables mode.
func TestNodePortAddresses(t *testing.T) {
	for name, tc := range map[string]struct {
		flags   []string
		cidrs   []string
		primary bool
	}{
		"iptables default: every local address": {flags: []string{"--proxy-mode=iptables"}},
		"nftables default: primary":             {flags: []string{"--proxy-mode=nftables"}, primary: true},
		"primary in iptables mode":              {flags: []string{"--nodeport-addresses=primary"}, primary: true},
		"all in nftables mode":                  {flags: []string{"--proxy-mode=nftables", "--nodeport-addresses=all"}},
		"localhost and a CIDR": {flags: []string{"--nodeport-addresses=localhost,10.0.0.0/8"},
			cidrs: []string{"127.0.0.0/8", "::1/128", "10.0.0.0/8"}},
		"primary and a CIDR": {flags: []string{"--proxy-mode=nftables", "--nodeport-addresses=primary,fd00::/64"},
			cidrs: []string{"fd00::/64"}, primary: true},
		"one family's all is a CIDR": {flags: []string{"--nodeport-addresses=0.0.0.0/0"}, cidrs: []string{"0.0.0.0/0"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := completeFlags(tc.flags...)
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Prefix
			for _, c := range tc.cidrs {
				want = append(want, netip.MustParsePrefix(c))
			}
			if diff := cmp.Diff(want, got.NodePortAddresses, cmpConfig...); diff != "" || got.NodePortPrimary != tc.primary {
				t.Errorf("NodePortAddresses (-want +got):\n%s\nprimary %v, want %v", diff, got.NodePortPrimary, tc.primary)
			}
		})
	}
}

// TestCompleteNamesEveryBadFlag checks that every bad value is reported,
// each with its flag, none dropped after the first; kube-proxy settings
// whose behaviour svcnet does not have are refused, not ignored.
func TestCompleteNamesEveryBadFlag(t *testing.T) {
	_, err := completeFlags("--node-name=", "--mode=ipvs", "--cluster-cidr=10.244.0.0/16,10.300.0.0/16,fd00::/200",
		"--nodeport-addresses=eth0", "--sync-period=0s", "--min-sync-period=-1s", "--netns=/nonexistent/netns",
		"--detect-local-mode=BridgeInterface", "--iptables-masquerade-bit=15", "--conntrack-min=-1",
		"--conntrack-udp-timeout=-1s", "--oom-score-adj=2000", "--bind-address=node", "--init-only", "--write-config-to=/tmp/x",
		"--metrics-bind-address=10249", "--api-bind-address=10266", "--api-tls-cert-file=/c")
	if err == nil {
		t.Fatal("bad flags completed")
	}
	for _, want := range []string{`--hostname-override must not be empty`, `--proxy-mode: "ipvs" is a kube-proxy mode that svcnet does not implement`,
		`--cluster-cidr "10.300.0.0/16"`, `--cluster-cidr "fd00::/200"`, `--nodeport-addresses "eth0"`, `--iptables-sync-period must be positive`,
		`--iptables-min-sync-period must not be negative`, `--netns`, `--detect-local-mode: "BridgeInterface"`, `--iptables-masquerade-bit 15`,
		`--conntrack-min must not be negative`, `--conntrack-udp-timeout must not be negative`, `--oom-score-adj must be in`,
		`--bind-address "node"`, `--init-only`, `--write-config-to`, `--metrics-bind-address "10249"`, `--api-bind-address "10266"`,
		`--api-tls-cert-file and --api-tls-private-key-file go together`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %s:\n%v", want, err)
		}
	}
	for _, mode := range []string{"kernelspace", "userspace"} {
		if _, err := completeFlags("--proxy-mode=" + mode); err == nil {
			t.Errorf("--proxy-mode=%s completed", mode)
		}
	}
	if _, err := completeFlags("--proxy-name=svcnet", "--proxy-mode=iptables"); err == nil || !strings.Contains(err.Error(), "--proxy-name shares the node") {
		t.Errorf("--proxy-name in iptables mode: %v, want the clash with kube-proxy's chains named", err)
	}
	if _, err := completeFlags("--proxy-name=svcnet", "--proxy-mode=nftables"); err != nil {
		t.Errorf("--proxy-name in nftables mode: %v", err)
	}
	for _, mode := range []string{"iptables", "nftables"} {
		if _, err := completeFlags("--iptables-localhost-nodeports=false", "--proxy-mode="+mode); err != nil {
			t.Errorf("--iptables-localhost-nodeports=false in %s mode: %v", mode, err)
		}
	}
}

// TestConfigFileErrorsNameTheFile checks that a setting from the file is
// named by its field, and that a file kube-proxy would not load is
// refused.
func TestConfigFileErrorsNameTheFile(t *testing.T) {
	file := writeConfig(t, "mode: ipvs\nclusterCIDR: 10.300.0.0/16\ndetectLocalMode: InterfaceNamePrefix\n")
	_, err := completeFlags("--config=" + file)
	if err == nil {
		t.Fatal("bad file completed")
	}
	for _, want := range []string{file + `: mode: "ipvs"`, file + `: clusterCIDR "10.300.0.0/16"`, file + `: detectLocalMode: "InterfaceNamePrefix"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %s:\n%v", want, err)
		}
	}
	other := filepath.Join(t.TempDir(), "kubelet.conf")
	if err := os.WriteFile(other, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{other, filepath.Join(t.TempDir(), "missing.conf")} {
		if _, err := completeFlags("--config=" + path); err == nil || !strings.Contains(err.Error(), "--config "+path) {
			t.Errorf("--config %s: %v", path, err)
		}
	}
}

// TestIgnoredSettingsAreNamed checks that what svcnet accepts and does not
// act on is named, with why, from flags and from the file.
func TestIgnoredSettingsAreNamed(t *testing.T) {
	got, err := completeFlags("--feature-gates=NFTablesLocalhostNodePorts=true", "--profiling", "--ipvs-scheduler=rr")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--feature-gates (kube-proxy's feature gates do not apply to svcnet)",
		"--ipvs-scheduler (svcnet has no ipvs mode)", "--profiling (svcnet serves /debug/pprof on --pprof-bind-address)"}
	if diff := cmp.Diff(want, got.Ignored, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("Ignored (-want +got):\n%s", diff)
	}

	file := writeConfig(t, "metadata:\n  name: config\nfeatureGates:\n  Foo: true\nenableProfiling: true\nipvs:\n  strictARP: true\n")
	got, err = completeFlags("--config=" + file)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(got.Ignored, "\n")
	for _, want := range []string{"was read leniently", `unknown field "metadata"`, "featureGates (", "enableProfiling (", "ipvs (svcnet has no ipvs mode)"} {
		if !strings.Contains(joined, want) {
			t.Errorf("Ignored does not name %s:\n%s", want, joined)
		}
	}
}

// TestDeprecatedPorts checks kube-proxy's --healthz-port and
// --metrics-port: 0 turns the server off, another port moves it.
func TestDeprecatedPorts(t *testing.T) {
	got, err := completeFlags("--healthz-port=0", "--metrics-port=9999")
	if err != nil {
		t.Fatal(err)
	}
	if got.HealthzBindAddress != "0" || got.MetricsBindAddress != "127.0.0.1:9999" {
		t.Errorf("healthz %q, metrics %q; want 0 and 127.0.0.1:9999", got.HealthzBindAddress, got.MetricsBindAddress)
	}
}

// TestLocalhostNodePortsFollowKubeProxy checks when the agent accepts
// NodePorts on 127.0.0.0/8 (and so sets route_localnet), as kube-proxy's
// iptables proxier decides it.
func TestLocalhostNodePortsFollowKubeProxy(t *testing.T) {
	for name, tc := range map[string]struct {
		flags []string
		want  bool
	}{
		"iptables, every address":                {[]string{"--mode=iptables"}, true},
		"iptables, a range holding 127.0.0.0":    {[]string{"--mode=iptables", "--nodeport-addresses=127.0.0.0/8,192.168.1.0/24"}, true},
		"iptables, 127.0.0.1 alone":              {[]string{"--mode=iptables", "--nodeport-addresses=127.0.0.1/32"}, true},
		"iptables, 0.0.0.0/0":                    {[]string{"--mode=iptables", "--nodeport-addresses=0.0.0.0/0"}, true},
		"iptables, IPv6 ranges only":             {[]string{"--mode=iptables", "--nodeport-addresses=fd00::/64"}, true},
		"iptables, IPv4 ranges without loopback": {[]string{"--mode=iptables", "--nodeport-addresses=192.168.1.0/24,fd00::/64"}, false},
		"iptables, turned off":                   {[]string{"--mode=iptables", "--iptables-localhost-nodeports=false"}, false},
		"iptables, primary":                      {[]string{"--mode=iptables", "--nodeport-addresses=primary"}, false},
		"nftables":                               {[]string{"--mode=nftables"}, false},
	} {
		cfg, err := completeFlags(append([]string{"--node-name=node-a"}, tc.flags...)...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.LocalhostNodePorts != tc.want {
			t.Errorf("%s: LocalhostNodePorts %t, want %t", name, cfg.LocalhostNodePorts, tc.want)
		}
	}
}

// TestLocalhostNodePortsOffWithoutTheSysctl: where route_localnet cannot
// be set (here: the namespace is gone; in a DaemonSet that is not
// privileged, a read-only /proc/sys), the agent starts with localhost
// NodePorts off rather than exiting or claiming them.
func TestLocalhostNodePortsOffWithoutTheSysctl(t *testing.T) {
	cfg := testConfig(t, "--mode=iptables")
	if !cfg.LocalhostNodePorts {
		t.Fatal("the default iptables configuration has localhost NodePorts off")
	}
	cfg.NetNS = filepath.Join(t.TempDir(), "no-such-netns")
	a, err := New(newFakeClient(), cfg, logr.Discard())
	if err != nil {
		t.Fatalf("New without the sysctl: %v", err)
	}
	if a.cfg.LocalhostNodePorts {
		t.Error("localhost NodePorts stayed on without route_localnet")
	}
}

// TestKubeProxyOptionsServeNoAPI: run as kube-proxy, whose ServiceAccount
// may review neither tokens nor access, the agent serves no API and
// announces nothing, unless told to.
func TestKubeProxyOptionsServeNoAPI(t *testing.T) {
	for flags, want := range map[string]string{"": "0", "--api-bind-address=0.0.0.0:10266": "0.0.0.0:10266"} {
		opts := KubeProxyOptions()
		fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
		opts.AddFlags(fs)
		args := []string{"--hostname-override=node-a"}
		if flags != "" {
			args = append(args, flags)
		}
		must(t, fs.Parse(args))
		cfg, err := opts.Complete()
		must(t, err)
		if cfg.API.BindAddress != want || cfg.Announce.Enabled {
			t.Errorf("kube-proxy's options with %q: API at %q, announcing %v; want %q, not announcing", flags, cfg.API.BindAddress, cfg.Announce.Enabled, want)
		}
	}
}
