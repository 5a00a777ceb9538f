package agent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/announce"
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
	if err := fs.Parse(flags); err != nil {
		return Config{}, err
	}
	return opts.Complete()
}

// TestCompleteTypesEveryFlagOnce checks that Complete turns the flags into
// the values the agent uses, so the sync path has nothing left to parse.
func TestCompleteTypesEveryFlagOnce(t *testing.T) {
	got, err := completeFlags("--node-name=node-a", "--mode=nftables",
		"--cluster-cidr=10.244.0.0/16, fd00:10:244::/56", "--nodeport-addresses=192.168.1.7/24,::1/128",
		"--sync-period=10s", "--min-sync-period=1s", "--healthz-bind-address=", "--metrics-bind-address=127.0.0.1:10249",
		"--announce-heartbeat-interval=200ms", "--announce-dead-after=1s")
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
		// Masked, as the sync path compares addresses with them.
		NodePortAddresses:  []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24"), netip.MustParsePrefix("::1/128")},
		SyncPeriod:         10 * time.Second,
		MinSyncPeriod:      time.Second,
		HealthTimeout:      20 * time.Second,
		HealthzBindAddress: "0",
		MetricsBindAddress: "127.0.0.1:10249",
		PprofBindAddress:   "0",
		Announce:           announce.Options{Enabled: true, HeartbeatInterval: 200 * time.Millisecond, DeadAfter: time.Second},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("Complete (-want +got):\n%s", diff)
	}
}

// TestCompleteNamesEveryBadFlag checks that every bad value is reported,
// each with its flag, none dropped after the first.
func TestCompleteNamesEveryBadFlag(t *testing.T) {
	_, err := completeFlags("--node-name=", "--mode=ipvs", "--cluster-cidr=10.244.0.0/16,10.300.0.0/16,fd00::/200",
		"--nodeport-addresses=eth0", "--sync-period=0s", "--min-sync-period=-1s", "--netns=/nonexistent/netns")
	if err == nil {
		t.Fatal("bad flags completed")
	}
	for _, want := range []string{`--node-name must not be empty`, `--mode "ipvs"`, `--cluster-cidr "10.300.0.0/16"`,
		`--cluster-cidr "fd00::/200"`, `--nodeport-addresses "eth0"`, `--sync-period must be positive`,
		`--min-sync-period must not be negative`, `--netns`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %s:\n%v", want, err)
		}
	}
}
