package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// The dataplane modes.
const (
	ModeIPTables = iptables.Mode
	ModeNFTables = nftables.Mode
)

// Modes are the valid values of --mode.
var Modes = []string{ModeIPTables, ModeNFTables}

// Options are `svcnet agent`'s settings; AddFlags binds them, with
// kube-proxy's flag names where the meaning is the same.
type Options struct {
	Kubeconfig         string
	NodeName           string
	Mode               string
	ClusterCIDRs       []string
	MasqueradeAll      bool
	NodePortAddresses  []string
	ProxyName          string
	SyncPeriod         time.Duration
	MinSyncPeriod      time.Duration
	HealthzBindAddress string
	MetricsBindAddress string
	PprofBindAddress   string
	// Cleanup removes the rules of --mode from the node and exits, instead
	// of running (kube-proxy's --cleanup).
	Cleanup bool
	// NetNS, when set, is the network namespace (e.g. /run/netns/node-1)
	// whose rules this agent programs and where it serves health checks;
	// used to run simulated nodes from one machine.
	NetNS string

	// Announce configures the speaker that announces LoadBalancer
	// addresses (dataplane/announce).
	Announce announce.Options
}

// DefaultOptions are kube-proxy's defaults where they apply.
func DefaultOptions() Options {
	host, _ := os.Hostname()
	return Options{
		NodeName:           strings.ToLower(host),
		Mode:               ModeIPTables,
		SyncPeriod:         30 * time.Second,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		Announce:           announce.DefaultOptions(),
	}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster configuration, then $KUBECONFIG.")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node's Node object (default: the hostname).")
	fs.StringVar(&o.Mode, "mode", o.Mode, "Dataplane: iptables or nftables. On start the agent removes the rules the other mode left (svcnet's or kube-proxy's).")
	fs.StringSliceVar(&o.ClusterCIDRs, "cluster-cidr", o.ClusterCIDRs, "Pod CIDRs (comma separated, one per family); traffic to a cluster IP from outside them is masqueraded.")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", o.MasqueradeAll, "Masquerade all traffic to cluster IPs.")
	fs.StringSliceVar(&o.NodePortAddresses, "nodeport-addresses", o.NodePortAddresses, "CIDRs of the local addresses that accept NodePort traffic. Empty: all local addresses.")
	fs.StringVar(&o.ProxyName, "proxy-name", o.ProxyName, "Handle Services labelled service.kubernetes.io/service-proxy-name with this value (and only those so labelled with it).")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "Interval of periodic resyncs: every rendered Service is re-read, 500 at a time between syncs, and those whose objects changed unseen re-rendered; once an hour (and after a failed apply) the resync is full: every Service re-rendered, live rules read, stale chains removed, every chain rewritten.")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", o.MinSyncPeriod, "Minimum time between syncs; 0 applies changes as soon as they arrive, coalescing bursts.")
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", o.HealthzBindAddress, "Address of /healthz; empty or 0 disables it.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of /metrics; empty or 0 disables it.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "Address of Go's /debug/pprof endpoints for profiling; empty or 0 disables them.")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "Remove the rules of --mode from the node and exit.")
	fs.StringVar(&o.NetNS, "netns", o.NetNS, "Program this network namespace (a path like /run/netns/NAME) instead of the agent's own; for simulated nodes.")
	o.Announce.AddFlags(fs)
}

// Config is Options completed: every flag checked once and turned into
// the value the agent uses (ranges as netip.Prefix by family, durations,
// addresses), as kube-proxy's Complete does, so that nothing on the sync
// path parses a flag again or meets a parse error late.
type Config struct {
	NodeName string
	Mode     string
	// ClusterCIDRs are --cluster-cidr's ranges by IP family.
	ClusterCIDRs  map[corev1.IPFamily][]netip.Prefix
	MasqueradeAll bool
	// NodePortAddresses are --nodeport-addresses' ranges (both families);
	// empty: every local address accepts NodePort traffic.
	NodePortAddresses []netip.Prefix
	ProxyName         string
	SyncPeriod        time.Duration
	MinSyncPeriod     time.Duration
	// HealthTimeout is how long a queued change may wait for its sync
	// before /healthz fails: twice --sync-period, kube-proxy's choice.
	HealthTimeout time.Duration
	// The bind addresses, "0" where a server is off.
	HealthzBindAddress string
	MetricsBindAddress string
	PprofBindAddress   string
	Cleanup            bool
	NetNS              string
	// Announce configures the speaker (dataplane/announce).
	Announce announce.Options
}

// Complete checks the options, naming each bad flag, and turns them into
// a Config.
func (o *Options) Complete() (Config, error) {
	var errs []error
	if !slices.Contains(Modes, o.Mode) {
		errs = append(errs, fmt.Errorf("--mode %q is not supported; valid modes: %s", o.Mode, strings.Join(Modes, ", ")))
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name must not be empty"))
	}
	clusterCIDRs, err := parsePrefixes("--cluster-cidr", o.ClusterCIDRs)
	if err != nil {
		errs = append(errs, err)
	}
	nodePortAddresses, err := parsePrefixes("--nodeport-addresses", o.NodePortAddresses)
	if err != nil {
		errs = append(errs, err)
	}
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--sync-period must be positive, got %s", o.SyncPeriod))
	}
	if o.MinSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--min-sync-period must not be negative, got %s", o.MinSyncPeriod))
	}
	if o.Announce.Enabled {
		if err := o.Announce.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.NetNS != "" {
		if _, err := os.Stat(o.NetNS); err != nil {
			errs = append(errs, fmt.Errorf("--netns: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	byFamily := map[corev1.IPFamily][]netip.Prefix{}
	for _, c := range clusterCIDRs {
		f := ipfamily.OfPrefix(c)
		byFamily[f] = append(byFamily[f], c)
	}
	return Config{
		NodeName:           o.NodeName,
		Mode:               o.Mode,
		ClusterCIDRs:       byFamily,
		MasqueradeAll:      o.MasqueradeAll,
		NodePortAddresses:  nodePortAddresses,
		ProxyName:          o.ProxyName,
		SyncPeriod:         o.SyncPeriod,
		MinSyncPeriod:      o.MinSyncPeriod,
		HealthTimeout:      2 * o.SyncPeriod,
		HealthzBindAddress: bindAddress(o.HealthzBindAddress),
		MetricsBindAddress: bindAddress(o.MetricsBindAddress),
		PprofBindAddress:   bindAddress(o.PprofBindAddress),
		Cleanup:            o.Cleanup,
		NetNS:              o.NetNS,
		Announce:           o.Announce,
	}, nil
}

// Validate checks the options, naming the bad flag.
func (o *Options) Validate() error {
	_, err := o.Complete()
	return err
}

// bindAddress is controller-runtime's spelling of a server's address:
// "0" for none.
func bindAddress(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

func parsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", flag, s, err))
			continue
		}
		out = append(out, p.Masked())
	}
	return out, errors.Join(errs...)
}

// GCPercent is the garbage collection target the agent process runs with
// when GOGC is not set: a node agent runs on every node and is idle
// between changes, so it trades a little CPU for a smaller heap
// (docs/BENCHMARKS.md, (h)). GOGC, when set, wins.
const GCPercent = 50

// GCPercentFor tells whether the process should set GCPercent, given how
// it looks up its environment.
func GCPercentFor(lookupEnv func(string) (string, bool)) (int, bool) {
	if _, set := lookupEnv("GOGC"); set {
		return 0, false
	}
	return GCPercent, true
}
