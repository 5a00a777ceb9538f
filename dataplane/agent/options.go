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
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "Interval of periodic resyncs: every Service is re-read and those whose objects changed unseen re-rendered; once an hour (and after a failed apply) the resync is full: every Service re-rendered, live rules read, stale chains removed, every chain rewritten.")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", o.MinSyncPeriod, "Minimum time between syncs; 0 applies changes as soon as they arrive, coalescing bursts.")
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", o.HealthzBindAddress, "Address of /healthz; empty or 0 disables it.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of /metrics; empty or 0 disables it.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "Address of Go's /debug/pprof endpoints for profiling; empty or 0 disables them.")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "Remove the rules of --mode from the node and exit.")
	fs.StringVar(&o.NetNS, "netns", o.NetNS, "Program this network namespace (a path like /run/netns/NAME) instead of the agent's own; for simulated nodes.")
	o.Announce.AddFlags(fs)
}

// Validate checks the options, naming the bad flag.
func (o *Options) Validate() error {
	var errs []error
	if !slices.Contains(Modes, o.Mode) {
		errs = append(errs, fmt.Errorf("--mode %q is not supported; valid modes: %s", o.Mode, strings.Join(Modes, ", ")))
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name must not be empty"))
	}
	if _, err := o.clusterCIDRs(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.nodePortPrefixes(); err != nil {
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
	return errors.Join(errs...)
}

func (o *Options) clusterCIDRs() ([]netip.Prefix, error) {
	return parsePrefixes("--cluster-cidr", o.ClusterCIDRs)
}

// clusterCIDRsByFamily splits --cluster-cidr by IP family.
func (o *Options) clusterCIDRsByFamily() (map[corev1.IPFamily][]netip.Prefix, error) {
	cidrs, err := o.clusterCIDRs()
	if err != nil {
		return nil, err
	}
	out := map[corev1.IPFamily][]netip.Prefix{}
	for _, c := range cidrs {
		f := ipfamily.OfPrefix(c)
		out[f] = append(out[f], c)
	}
	return out, nil
}

func (o *Options) nodePortPrefixes() ([]netip.Prefix, error) {
	return parsePrefixes("--nodeport-addresses", o.NodePortAddresses)
}

func parsePrefixes(flag string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
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
