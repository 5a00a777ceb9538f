// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/nodeview"
	"github.com/svcnet-io/svcnet/internal/platform/enumflag"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
)

// The dataplane modes.
const (
	ModeIPTables = iptables.Mode
	ModeNFTables = nftables.Mode
)

// Modes are the valid values of --mode.
var Modes = []string{ModeIPTables, ModeNFTables}

// kube-proxy's defaults that svcnet's own flags share (pkg/proxy/apis/config
// v1alpha1 defaults of v1.37).
const (
	defaultHealthzPort          = 10256
	defaultMetricsPort          = 10249
	defaultMasqueradeBit        = 14
	defaultConntrackMaxPerCore  = 32 * 1024
	defaultConntrackMin         = 128 * 1024
	defaultConntrackEstablished = 24 * time.Hour
	defaultConntrackCloseWait   = time.Hour
	defaultOOMScoreAdj          = -999
)

// Options are `svcnet agent`'s settings. AddFlags binds them under
// kube-proxy's flag names (and svcnet's older names beside them), so that
// kube-proxy's command line runs the agent; ConfigFile reads kube-proxy's
// configuration file. Complete checks them once into a Config.
type Options struct {
	// ConfigFile is a KubeProxyConfiguration (kubeproxy.config.k8s.io/
	// v1alpha1) file, as kubeadm's ConfigMap kube-proxy holds it (--config).
	// As in kube-proxy, it replaces every setting it holds, flags included
	// (they are named in a warning); --hostname-override, --master, -v and
	// svcnet's own flags still apply.
	ConfigFile string
	Kubeconfig string
	// Master overrides the API server address of the kubeconfig.
	Master       string
	KubeAPIQPS   float32
	KubeAPIBurst int32
	NodeName     string
	Mode         string
	ClusterCIDRs []string
	// DetectLocalMode is how Pod traffic is told from the rest:
	// ClusterCIDR (--cluster-cidr) or NodeCIDR (the Node's podCIDRs).
	DetectLocalMode string
	MasqueradeAll   bool
	// MasqueradeBit is the fwmark bit of traffic to masquerade; svcnet's
	// rules use kube-proxy's default, 14, and accept no other.
	MasqueradeBit int32
	// LocalhostNodePorts is kube-proxy's iptables.localhostNodePorts;
	// svcnet's iptables rules always accept NodePorts on 127.0.0.1.
	LocalhostNodePorts bool
	// NodePortAddresses are CIDRs and kube-proxy's keywords primary,
	// localhost and all.
	NodePortAddresses []string
	// BindAddress overrides the Node's primary IP (kube-proxy's
	// --bind-address: no socket is bound to it).
	BindAddress         string
	BindAddressHardFail bool
	ProxyName           string
	SyncPeriod          time.Duration
	MinSyncPeriod       time.Duration
	Conntrack           ConntrackConfig
	OOMScoreAdj         int32
	HealthzBindAddress  string
	MetricsBindAddress  string
	PprofBindAddress    string
	// API is the agent's own API (what it programmed for a Service).
	API APIOptions
	// Cleanup removes the rules of every mode, svcnet's and kube-proxy's,
	// from the node and exits, instead of running (kube-proxy's --cleanup).
	Cleanup bool
	// NetNS, when set, is the network namespace (e.g. /run/netns/node-1)
	// whose rules this agent programs and where it serves health checks;
	// used to run simulated nodes from one machine.
	NetNS string

	// Announce configures the speaker that announces LoadBalancer
	// addresses (dataplane/announce).
	Announce announce.Options

	// unsupported holds kube-proxy's settings that svcnet accepts and
	// does not act on, to name them at start-up.
	unsupported unsupportedOptions
	// flags is the flag set AddFlags bound, asked which flags were given.
	flags *pflag.FlagSet
}

// ConntrackConfig is kube-proxy's conntrack configuration: the node's
// conntrack sysctls the agent sets at start. Zero leaves a value as it is.
type ConntrackConfig struct {
	MaxPerCore            int32
	Min                   int32
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	TCPBeLiberal          bool
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
}

// unsupportedOptions are kube-proxy settings svcnet takes so that
// kube-proxy's command lines and files load, and does not act on.
type unsupportedOptions struct {
	featureGates       map[string]bool
	profiling          bool
	showHiddenMetrics  string
	configSyncPeriod   time.Duration
	contentType        string
	podBridgeInterface string
	podInterfacePrefix string
	ipvsScheduler      string
	ipvsExcludeCIDRs   []string
	ipvsStrictARP      bool
	ipvsDurations      [5]time.Duration
	initOnly           bool
	writeConfigTo      string
	healthzPort        int32
	metricsPort        int32
	logVerbosity       *int
	// fromFile are the notes loading --config made.
	fromFile []string
}

// DefaultOptions are kube-proxy's defaults where they apply.
func DefaultOptions() Options {
	host, _ := os.Hostname()
	return Options{
		NodeName:           strings.ToLower(host),
		Mode:               ModeIPTables,
		SyncPeriod:         30 * time.Second,
		MasqueradeBit:      defaultMasqueradeBit,
		LocalhostNodePorts: true,
		Conntrack: ConntrackConfig{
			MaxPerCore:            defaultConntrackMaxPerCore,
			Min:                   defaultConntrackMin,
			TCPEstablishedTimeout: defaultConntrackEstablished,
			TCPCloseWaitTimeout:   defaultConntrackCloseWait,
		},
		OOMScoreAdj:        defaultOOMScoreAdj,
		HealthzBindAddress: "0.0.0.0:" + strconv.Itoa(defaultHealthzPort),
		MetricsBindAddress: "127.0.0.1:" + strconv.Itoa(defaultMetricsPort),
		API:                APIOptions{BindAddress: "0.0.0.0:" + strconv.Itoa(nodeview.DefaultPort)},
		Announce:           announce.DefaultOptions(),
		unsupported:        unsupportedOptions{healthzPort: defaultHealthzPort, metricsPort: defaultMetricsPort},
	}
}

// KubeProxyOptions are the agent's options when it runs as kube-proxy
// (`svcnet kube-proxy`, or the binary named kube-proxy): DefaultOptions
// with kube-proxy's defaults where svcnet's differ, no LoadBalancer
// speaker (kube-proxy announces nothing, and its ServiceAccount may read
// no LoadBalancerAnnouncements).
func KubeProxyOptions() Options {
	o := DefaultOptions()
	o.Announce.Enabled = false
	// Nor svcnet's API, which kube-proxy's ServiceAccount may not serve
	// (it reviews tokens and access).
	o.API.BindAddress = ""
	return o
}

// AddFlags binds the options to fs: kube-proxy's flags of v1.37 (those
// svcnet does not act on are accepted and named at start-up) and
// svcnet's own.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.flags = fs
	o.addClientFlags(fs)
	o.addProxyFlags(fs)
	o.addConntrackFlags(fs)
	o.addServerFlags(fs)
	o.addUnsupportedFlags(fs)
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "Remove every mode's rules (svcnet's and kube-proxy's iptables chains and nftables tables) from the node and exit.")
	fs.StringVar(&o.NetNS, "netns", o.NetNS, "Program this network namespace (a path like /run/netns/NAME) instead of the agent's own; for simulated nodes.")
	o.Announce.AddFlags(fs)
}

func (o *Options) addClientFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "A kube-proxy configuration file (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1). As in kube-proxy, its settings replace those of the flags; --hostname-override, --master, -v and svcnet's own flags still apply.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster configuration, then $KUBECONFIG.")
	fs.StringVar(&o.Master, "master", o.Master, "The address of the API server (overrides the kubeconfig's).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the API server (0: client-go's default).")
	fs.Int32Var(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server (0: client-go's default).")
	fs.StringVar(&o.NodeName, "hostname-override", o.NodeName, "Name of this node's Node object (default: the hostname, lower-cased).")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "svcnet's name for --hostname-override.")
}

func (o *Options) addProxyFlags(fs *pflag.FlagSet) {
	fs.Var(enumflag.Var(&o.Mode, "ProxyMode"), "proxy-mode", "Dataplane: iptables or nftables (kube-proxy's ipvs and kernelspace are refused). On start the agent removes the rules the other mode left (svcnet's or kube-proxy's).")
	fs.Var(enumflag.Var(&o.Mode, "ProxyMode"), "mode", "svcnet's name for --proxy-mode.")
	fs.StringSliceVar(&o.ClusterCIDRs, "cluster-cidr", o.ClusterCIDRs, "Pod CIDRs (comma separated, one per family); with --detect-local-mode=ClusterCIDR traffic to a cluster IP from outside them is masqueraded.")
	fs.Var(enumflag.Var(&o.DetectLocalMode, "LocalMode"), "detect-local-mode", "How traffic from local Pods is told: ClusterCIDR (--cluster-cidr, the default) or NodeCIDR (the Node's spec.podCIDRs, read at start).")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", o.MasqueradeAll, "Masquerade all traffic to cluster IPs.")
	fs.Int32Var(&o.MasqueradeBit, "iptables-masquerade-bit", o.MasqueradeBit, "The fwmark bit of packets to masquerade; svcnet's rules use 14 (0x4000) and refuse any other.")
	fs.BoolVar(&o.LocalhostNodePorts, "iptables-localhost-nodeports", o.LocalhostNodePorts, "In iptables mode, accept NodePort traffic on 127.0.0.0/8 when --nodeport-addresses includes it (or is empty), setting net.ipv4.conf.all.route_localnet=1 as kube-proxy does; false never accepts it.")
	fs.StringSliceVar(&o.NodePortAddresses, "nodeport-addresses", o.NodePortAddresses, "Local addresses that accept NodePort traffic: CIDRs and the keywords primary (the Node's primary IPs), localhost (127.0.0.0/8, ::1/128) and all. Empty: all in iptables mode, primary in nftables mode, as kube-proxy.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Overrides the Node's primary IP of its family (for --nodeport-addresses=primary and the node's own traffic through loadBalancerSourceRanges); no socket is bound to it, as in kube-proxy.")
	fs.StringVar(&o.ProxyName, "proxy-name", o.ProxyName, "Handle only the Services labelled service.kubernetes.io/service-proxy-name with this value, sharing the node with kube-proxy, whose rules are then never removed (nftables mode only).")
	syncHelp := "Interval of periodic resyncs: every rendered Service is re-read, 500 at a time between syncs, and those whose objects changed unseen re-rendered; once an hour (and after a failed apply) the resync is full: every Service re-rendered, live rules read, stale chains removed, every chain rewritten."
	fs.DurationVar(&o.SyncPeriod, "iptables-sync-period", o.SyncPeriod, syncHelp+" (kube-proxy's name, for both modes.)")
	fs.DurationVar(&o.SyncPeriod, "sync-period", o.SyncPeriod, "svcnet's name for --iptables-sync-period.")
	minSyncHelp := "Minimum time between syncs; 0 applies changes as soon as they arrive, coalescing bursts."
	fs.DurationVar(&o.MinSyncPeriod, "iptables-min-sync-period", o.MinSyncPeriod, minSyncHelp+" (kube-proxy's name, for both modes.)")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", o.MinSyncPeriod, "svcnet's name for --iptables-min-sync-period.")
}

func (o *Options) addConntrackFlags(fs *pflag.FlagSet) {
	c := &o.Conntrack
	fs.Int32Var(&c.MaxPerCore, "conntrack-max-per-core", c.MaxPerCore, "nf_conntrack_max per CPU core (0 leaves nf_conntrack_max as it is, and ignores --conntrack-min). A network namespace other than the host's cannot change it: set 0 there.")
	fs.Int32Var(&c.Min, "conntrack-min", c.Min, "Least nf_conntrack_max, whatever --conntrack-max-per-core gives.")
	fs.DurationVar(&c.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", c.TCPEstablishedTimeout, "Idle timeout of established TCP connections (0 leaves it as it is).")
	fs.DurationVar(&c.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", c.TCPCloseWaitTimeout, "Timeout of TCP connections in CLOSE_WAIT (0 leaves it as it is).")
	fs.BoolVar(&c.TCPBeLiberal, "conntrack-tcp-be-liberal", c.TCPBeLiberal, "Set nf_conntrack_tcp_be_liberal to 1: out-of-window TCP packets are not marked INVALID.")
	fs.DurationVar(&c.UDPTimeout, "conntrack-udp-timeout", c.UDPTimeout, "Idle timeout of UNREPLIED UDP flows (0 leaves it as it is).")
	fs.DurationVar(&c.UDPStreamTimeout, "conntrack-udp-timeout-stream", c.UDPStreamTimeout, "Idle timeout of ASSURED UDP flows (0 leaves it as it is).")
}

func (o *Options) addServerFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.HealthzBindAddress, "healthz-bind-address", o.HealthzBindAddress, "Address of /healthz and /livez; empty or 0 disables them.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of /metrics; empty or 0 disables it.")
	fs.BoolVar(&o.BindAddressHardFail, "bind-address-hard-fail", o.BindAddressHardFail, "Accepted for kube-proxy; not used (svcnet retries the health address and exits when the metrics address fails).")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "Address of Go's /debug/pprof endpoints for profiling; empty or 0 disables them.")
	fs.StringVar(&o.API.BindAddress, "api-bind-address", o.API.BindAddress, "Address of the agent's API (HTTPS): what it programmed for a Service, read by `svcnet explain`. Callers are authenticated and authorized as by the kubelet: they need get on nodes/proxy of this node. Empty or 0 disables it.")
	fs.StringVar(&o.API.TLSCertFile, "api-tls-cert-file", o.API.TLSCertFile, "The API's serving certificate (PEM); with --api-tls-private-key-file. Empty: a self-signed one, made at start.")
	fs.StringVar(&o.API.TLSKeyFile, "api-tls-private-key-file", o.API.TLSKeyFile, "The key of --api-tls-cert-file (PEM).")
	fs.StringVar(&o.API.ClientCAFile, "api-client-ca-file", o.API.ClientCAFile, "CA bundle (PEM) of the client certificates the API accepts. Empty: the cluster's, from the ConfigMap kube-system/extension-apiserver-authentication, followed as it changes.")
	fs.Int32Var(&o.OOMScoreAdj, "oom-score-adj", o.OOMScoreAdj, "The agent process's oom_score_adj, in [-1000, 1000].")
	u := &o.unsupported
	fs.Int32Var(&u.healthzPort, "healthz-port", u.healthzPort, "Port of the health server (0 disables it).")
	_ = fs.MarkDeprecated("healthz-port", "use --healthz-bind-address instead.")
	fs.Int32Var(&u.metricsPort, "metrics-port", u.metricsPort, "Port of the metrics server (0 disables it).")
	_ = fs.MarkDeprecated("metrics-port", "use --metrics-bind-address instead.")
}

// unsupportedFlags are kube-proxy's flags that svcnet accepts and does not
// act on, with why; giving one is named at start-up.
var unsupportedFlags = map[string]string{
	"feature-gates":                   "kube-proxy's feature gates do not apply to svcnet",
	"profiling":                       "svcnet serves /debug/pprof on --pprof-bind-address",
	"show-hidden-metrics-for-version": "svcnet hides no metrics",
	"config-sync-period":              "svcnet's informers do not resync; --sync-period re-reads Services",
	"kube-api-content-type":           "svcnet's client chooses its content type",
	"ipvs-sync-period":                "svcnet has no ipvs mode",
	"ipvs-min-sync-period":            "svcnet has no ipvs mode",
	"ipvs-scheduler":                  "svcnet has no ipvs mode",
	"ipvs-exclude-cidrs":              "svcnet has no ipvs mode",
	"ipvs-strict-arp":                 "svcnet has no ipvs mode",
	"ipvs-tcp-timeout":                "svcnet has no ipvs mode",
	"ipvs-tcpfin-timeout":             "svcnet has no ipvs mode",
	"ipvs-udp-timeout":                "svcnet has no ipvs mode",
	"bind-address-hard-fail":          "svcnet retries the health address while another process holds it, and exits when the metrics address fails",
	"pod-bridge-interface":            "only read with --detect-local-mode=BridgeInterface, which svcnet refuses",
	"pod-interface-name-prefix":       "only read with --detect-local-mode=InterfaceNamePrefix, which svcnet refuses",
}

func (o *Options) addUnsupportedFlags(fs *pflag.FlagSet) {
	u := &o.unsupported
	u.featureGates = map[string]bool{}
	fs.Var(cliflag.NewMapStringBool(&u.featureGates), "feature-gates", "Accepted for kube-proxy; not used.")
	fs.BoolVar(&u.profiling, "profiling", u.profiling, "Accepted for kube-proxy; see --pprof-bind-address.")
	fs.StringVar(&u.showHiddenMetrics, "show-hidden-metrics-for-version", u.showHiddenMetrics, "Accepted for kube-proxy; not used.")
	fs.DurationVar(&u.configSyncPeriod, "config-sync-period", u.configSyncPeriod, "Accepted for kube-proxy; not used.")
	fs.StringVar(&u.contentType, "kube-api-content-type", u.contentType, "Accepted for kube-proxy; not used.")
	fs.StringVar(&u.podBridgeInterface, "pod-bridge-interface", u.podBridgeInterface, "Accepted for kube-proxy; not used.")
	fs.StringVar(&u.podInterfacePrefix, "pod-interface-name-prefix", u.podInterfacePrefix, "Accepted for kube-proxy; not used.")
	fs.DurationVar(&u.ipvsDurations[0], "ipvs-sync-period", u.ipvsDurations[0], "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.DurationVar(&u.ipvsDurations[1], "ipvs-min-sync-period", u.ipvsDurations[1], "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.StringVar(&u.ipvsScheduler, "ipvs-scheduler", u.ipvsScheduler, "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.StringSliceVar(&u.ipvsExcludeCIDRs, "ipvs-exclude-cidrs", u.ipvsExcludeCIDRs, "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.BoolVar(&u.ipvsStrictARP, "ipvs-strict-arp", u.ipvsStrictARP, "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.DurationVar(&u.ipvsDurations[2], "ipvs-tcp-timeout", u.ipvsDurations[2], "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.DurationVar(&u.ipvsDurations[3], "ipvs-tcpfin-timeout", u.ipvsDurations[3], "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.DurationVar(&u.ipvsDurations[4], "ipvs-udp-timeout", u.ipvsDurations[4], "Accepted for kube-proxy; svcnet has no ipvs mode.")
	fs.BoolVar(&u.initOnly, "init-only", u.initOnly, "kube-proxy's; refused: svcnet has no separate privileged start.")
	fs.StringVar(&u.writeConfigTo, "write-config-to", u.writeConfigTo, "kube-proxy's; refused: svcnet does not write configuration files.")
}

// Config is Options completed: every flag checked once and turned into
// the value the agent uses (ranges as netip.Prefix by family, durations,
// addresses), as kube-proxy's Complete does, so that nothing on the sync
// path parses a flag again or meets a parse error late.
type Config struct {
	NodeName string
	Mode     string
	// ClusterCIDRs are --cluster-cidr's ranges by IP family; with
	// DetectLocalFromNode, the Node's podCIDRs replace them at start.
	ClusterCIDRs map[corev1.IPFamily][]netip.Prefix
	// DetectLocalFromNode is --detect-local-mode=NodeCIDR.
	DetectLocalFromNode bool
	MasqueradeAll       bool
	// NodePortAddresses are --nodeport-addresses' ranges (both families),
	// keywords expanded; empty (and no NodePortPrimary): every local
	// address accepts NodePort traffic.
	NodePortAddresses []netip.Prefix
	// NodePortPrimary is the keyword primary: the Node's primary IPs
	// (BindAddress first), read by Run at start, join NodePortAddresses.
	// New has no client to read them: its agent, as with an empty list,
	// accepts NodePorts on every local address.
	NodePortPrimary bool
	// BindAddress is --bind-address when it names an address.
	BindAddress   netip.Addr
	ProxyName     string
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	// HealthTimeout is how long a queued change may wait for its sync
	// before /healthz fails: twice --sync-period, kube-proxy's choice.
	HealthTimeout time.Duration
	// Conntrack are the conntrack sysctls set at start.
	Conntrack ConntrackConfig
	// The bind addresses, "0" where a server is off.
	HealthzBindAddress string
	MetricsBindAddress string
	PprofBindAddress   string
	// API is the agent's API; its BindAddress "0" where it is off.
	API     APIOptions
	Cleanup bool
	NetNS   string
	// Announce configures the speaker (dataplane/announce).
	Announce announce.Options

	// Client is how the agent reaches the API server.
	Client ClientConfig
	// OOMScoreAdj is the process's oom_score_adj (Main applies it).
	OOMScoreAdj int
	// LogVerbosity is the configuration file's logging.verbosity, to
	// apply when -v is not given; nil without a file.
	LogVerbosity *int
	// Ignored names the settings given that svcnet accepts and does not
	// act on, each with why; logged once at start-up.
	Ignored []string
	// KubeProxyConfiguration is the configuration in effect in kube-proxy's
	// form, which the metrics address serves at /configz as kube-proxy
	// does.
	KubeProxyConfiguration *v1alpha1.KubeProxyConfiguration
	// LocalhostNodePorts: in iptables mode, IPv4 NodePorts answer on
	// 127.0.0.0/8, which needs route_localnet=1 in the node's namespace.
	// kube-proxy's rule: --iptables-localhost-nodeports, and
	// --nodeport-addresses empty or with a range holding 127.0.0.0.
	LocalhostNodePorts bool
}

// ClientConfig is how the agent reaches the API server.
type ClientConfig struct {
	Kubeconfig string
	Master     string
	QPS        float32
	Burst      int32
}

// Complete checks the options, naming each bad flag (or field of the
// --config file), and turns them into a Config.
func (o *Options) Complete() (Config, error) {
	eff, err := o.effective()
	if err != nil {
		return Config{}, err
	}
	return eff.complete()
}

// effective are the options in force: with --config, the file's settings
// over the flags', as kube-proxy; without, the flags and their
// deprecated port forms.
func (o *Options) effective() (Options, error) {
	if o.ConfigFile == "" {
		eff := *o
		eff.applyDeprecatedPorts()
		return eff, nil
	}
	file, notes, err := loadKubeProxyConfiguration(o.ConfigFile)
	if err != nil {
		return Options{}, fmt.Errorf("--config %s: %w", o.ConfigFile, err)
	}
	eff := o.withFile(file)
	eff.unsupported.fromFile = append(notes, eff.unsupported.fromFile...)
	if flags := o.flagsReplacedByFile(); len(flags) > 0 {
		eff.unsupported.fromFile = append(eff.unsupported.fromFile,
			fmt.Sprintf("%s (--config is set: its settings replace these flags', as in kube-proxy)", strings.Join(flags, " ")))
	}
	return eff, nil
}

// overridesFile are the flags that apply even with --config, as in
// kube-proxy (--hostname-override, --master, the logging flags) and
// svcnet's own flags, which the file has no field for.
var overridesFile = []string{"config", "hostname-override", "node-name", "master", "cleanup", "init-only", "write-config-to",
	"proxy-name", "pprof-bind-address", "api-bind-address", "api-tls-cert-file", "api-tls-private-key-file", "api-client-ca-file", "netns", "v", "vmodule", "logtostderr", "log_file"}

// flagsReplacedByFile lists the flags given that --config replaces.
func (o *Options) flagsReplacedByFile() []string {
	var out []string
	if o.flags == nil {
		return nil
	}
	o.flags.Visit(func(f *pflag.Flag) {
		if !slices.Contains(overridesFile, f.Name) && !strings.HasPrefix(f.Name, "announce") {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// applyDeprecatedPorts applies kube-proxy's --healthz-port and
// --metrics-port, given without --config: 0 turns the server off, another
// port replaces the address's.
func (o *Options) applyDeprecatedPorts() {
	if o.flags == nil {
		return
	}
	if o.flags.Changed("healthz-port") {
		o.HealthzBindAddress = withPort(o.HealthzBindAddress, o.unsupported.healthzPort)
	}
	if o.flags.Changed("metrics-port") {
		o.MetricsBindAddress = withPort(o.MetricsBindAddress, o.unsupported.metricsPort)
	}
}

func withPort(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// complete validates the options in force into a Config.
func (o *Options) complete() (Config, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	mode, err := checkMode(o.Mode)
	add(o.named("proxy-mode", "mode", err))
	localMode, err := checkLocalMode(o.DetectLocalMode)
	add(o.named("detect-local-mode", "detectLocalMode", err))
	nodeName := strings.ToLower(strings.TrimSpace(o.NodeName))
	if nodeName == "" {
		add(errors.New(o.name("hostname-override", "hostnameOverride") + " must not be empty"))
	}
	clusterCIDRs, err := parsePrefixes(o.name("cluster-cidr", "clusterCIDR"), o.ClusterCIDRs)
	add(err)
	nodePorts, err := o.nodePortAddresses(mode)
	add(err)
	bindAddress, err := o.bindAddress()
	add(err)
	add(o.checkUnimplemented(mode))
	if o.ProxyName != "" && mode == ModeIPTables {
		add(errors.New("--proxy-name shares the node with kube-proxy, whose iptables chains (KUBE-SERVICES and the rest) svcnet's iptables mode writes too: each would overwrite the other's; share the node in nftables mode (--proxy-mode=nftables), whose table is svcnet's own"))
	}
	add(o.checkNumbers())
	add(o.checkServers())
	if o.Announce.Enabled {
		add(o.Announce.Validate())
	}
	if o.NetNS != "" {
		if _, err := os.Stat(o.NetNS); err != nil {
			add(fmt.Errorf("--netns: %w", err))
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
		NodeName:               nodeName,
		Mode:                   mode,
		ClusterCIDRs:           byFamily,
		DetectLocalFromNode:    localMode == LocalModeNodeCIDR,
		MasqueradeAll:          o.MasqueradeAll,
		NodePortAddresses:      nodePorts.cidrs,
		NodePortPrimary:        nodePorts.primary,
		BindAddress:            bindAddress,
		ProxyName:              o.ProxyName,
		SyncPeriod:             o.SyncPeriod,
		MinSyncPeriod:          o.MinSyncPeriod,
		HealthTimeout:          2 * o.SyncPeriod,
		Conntrack:              o.Conntrack,
		HealthzBindAddress:     bindAddressOrOff(o.HealthzBindAddress),
		MetricsBindAddress:     bindAddressOrOff(o.MetricsBindAddress),
		PprofBindAddress:       bindAddressOrOff(o.PprofBindAddress),
		API:                    APIOptions{BindAddress: bindAddressOrOff(o.API.BindAddress), TLSCertFile: o.API.TLSCertFile, TLSKeyFile: o.API.TLSKeyFile, ClientCAFile: o.API.ClientCAFile},
		Cleanup:                o.Cleanup,
		NetNS:                  o.NetNS,
		Announce:               o.Announce,
		Client:                 ClientConfig{Kubeconfig: o.Kubeconfig, Master: o.Master, QPS: o.KubeAPIQPS, Burst: o.KubeAPIBurst},
		OOMScoreAdj:            int(o.OOMScoreAdj),
		LogVerbosity:           o.unsupported.logVerbosity,
		Ignored:                o.ignored(),
		KubeProxyConfiguration: o.kubeProxyConfiguration(mode, localMode),
		LocalhostNodePorts:     mode == ModeIPTables && o.LocalhostNodePorts && !nodePorts.primary && acceptsIPv4Loopback(nodePorts.cidrs),
	}, nil
}

// name is how an error names a setting: the flag, or the field of the
// --config file that set it.
func (o *Options) name(flag, field string) string {
	if o.ConfigFile != "" && !slices.Contains(overridesFile, flag) {
		return fmt.Sprintf("--config %s: %s", o.ConfigFile, field)
	}
	return "--" + flag
}

func (o *Options) named(flag, field string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", o.name(flag, field), err)
}

// checkUnimplemented refuses the kube-proxy settings whose effect svcnet's
// rules do not have, rather than run with other behaviour.
func (o *Options) checkUnimplemented(mode string) error {
	var errs []error
	if o.MasqueradeBit != defaultMasqueradeBit {
		errs = append(errs, fmt.Errorf("%s %d: svcnet's rules mark with bit %d (0x4000) and cannot use another",
			o.name("iptables-masquerade-bit", mode+".masqueradeBit"), o.MasqueradeBit, defaultMasqueradeBit))
	}
	if o.unsupported.initOnly {
		errs = append(errs, errors.New("--init-only: svcnet has no separate privileged start; run the agent itself"))
	}
	if o.unsupported.writeConfigTo != "" {
		errs = append(errs, errors.New("--write-config-to: svcnet does not write kube-proxy configuration files"))
	}
	return errors.Join(errs...)
}

// checkNumbers checks the periods, the conntrack settings and the OOM
// score, as kube-proxy's validation does.
func (o *Options) checkNumbers() error {
	var errs []error
	if o.SyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("%s must be positive, got %s", o.name("iptables-sync-period", o.modeField()+".syncPeriod"), o.SyncPeriod))
	}
	if o.MinSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("%s must not be negative, got %s", o.name("iptables-min-sync-period", o.modeField()+".minSyncPeriod"), o.MinSyncPeriod))
	}
	c := o.Conntrack
	for _, n := range []struct {
		flag, field string
		negative    bool
	}{
		{"conntrack-max-per-core", "conntrack.maxPerCore", c.MaxPerCore < 0},
		{"conntrack-min", "conntrack.min", c.Min < 0},
		{"conntrack-tcp-timeout-established", "conntrack.tcpEstablishedTimeout", c.TCPEstablishedTimeout < 0},
		{"conntrack-tcp-timeout-close-wait", "conntrack.tcpCloseWaitTimeout", c.TCPCloseWaitTimeout < 0},
		{"conntrack-udp-timeout", "conntrack.udpTimeout", c.UDPTimeout < 0},
		{"conntrack-udp-timeout-stream", "conntrack.udpStreamTimeout", c.UDPStreamTimeout < 0},
	} {
		if n.negative {
			errs = append(errs, fmt.Errorf("%s must not be negative", o.name(n.flag, n.field)))
		}
	}
	if o.OOMScoreAdj < -1000 || o.OOMScoreAdj > 1000 {
		errs = append(errs, fmt.Errorf("%s must be in [-1000, 1000], got %d", o.name("oom-score-adj", "oomScoreAdj"), o.OOMScoreAdj))
	}
	return errors.Join(errs...)
}

// modeField is the section of the configuration file the mode reads its
// periods from.
func (o *Options) modeField() string {
	if o.Mode == ModeNFTables {
		return "nftables"
	}
	return "iptables"
}

// checkServers checks the servers' addresses: host:port, or empty or 0
// for none.
func (o *Options) checkServers() error {
	var errs []error
	for _, s := range []struct{ flag, field, addr string }{
		{"healthz-bind-address", "healthzBindAddress", o.HealthzBindAddress},
		{"metrics-bind-address", "metricsBindAddress", o.MetricsBindAddress},
		{"api-bind-address", "", o.API.BindAddress},
	} {
		if s.addr == "" || s.addr == "0" {
			continue
		}
		if _, _, err := net.SplitHostPort(s.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", o.name(s.flag, s.field), s.addr, err))
		}
	}
	if (o.API.TLSCertFile == "") != (o.API.TLSKeyFile == "") {
		errs = append(errs, errors.New("--api-tls-cert-file and --api-tls-private-key-file go together: give both or neither"))
	}
	return errors.Join(errs...)
}

func (o *Options) bindAddress() (netip.Addr, error) {
	if o.BindAddress == "" {
		return netip.Addr{}, nil
	}
	ip, err := netip.ParseAddr(o.BindAddress)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q: %w", o.name("bind-address", "bindAddress"), o.BindAddress, err)
	}
	if ip.IsUnspecified() {
		return netip.Addr{}, nil
	}
	return ip.Unmap(), nil
}

// ignored names the kube-proxy settings given that svcnet does not act
// on, each with why.
func (o *Options) ignored() []string {
	out := slices.Clone(o.unsupported.fromFile)
	if o.flags == nil || o.ConfigFile != "" {
		return out
	}
	o.flags.Visit(func(f *pflag.Flag) {
		if why, ok := unsupportedFlags[f.Name]; ok {
			out = append(out, fmt.Sprintf("--%s (%s)", f.Name, why))
		}
	})
	return out
}

// bindAddressOrOff is controller-runtime's spelling of a server's
// address: "0" for none.
func bindAddressOrOff(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// acceptsIPv4Loopback tells whether --nodeport-addresses lets NodePorts
// answer on 127.0.0.0/8: empty (every address), or a range holding
// 127.0.0.0, as kube-proxy's NodePortAddresses.ContainsIPv4Loopback.
func acceptsIPv4Loopback(prefixes []netip.Prefix) bool {
	v4 := false
	for _, p := range prefixes {
		if !p.Addr().Is4() {
			continue
		}
		v4 = true
		if p.Addr().IsLoopback() || p.Contains(netip.AddrFrom4([4]byte{127, 0, 0, 0})) {
			return true
		}
	}
	return !v4
}

func parsePrefixes(name string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, s, err))
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
