// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package up runs a whole Service networking control plane on one machine
// with no cluster, for `svcnet up` (the svcnet-up command). It starts etcd,
// kube-apiserver and kube-controller-manager from bin/k8s (with
// kube-controller-manager's EndpointSlice and ServiceCIDR controllers off,
// since svcnet replaces them) and svcnet's manager and node agents from
// the production binaries beside it (svcnet, svcnet-agent), supervises them as a kubelet
// supervises static Pods and DaemonSet Pods, keeps their state in a data
// dir, and stops every child on the way out. Its credentials, kubeconfig
// and readiness waits are localcluster/controlplane's, cluster DNS is
// localcluster/addons', and --demo runs localcluster/walkthrough.
package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/allocator/portrange"
	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/platform/enumflag"
	"github.com/svcnet-io/svcnet/internal/platform/ipfamily"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/walkthrough"
)

// Options are `svcnet up`'s settings as its flags give them; Complete
// checks them once into a Config.
type Options struct {
	// Name names the cluster (--name); empty: the default cluster.
	Name      string
	DataDir   string
	K8sBinDir string
	// ImagesDir holds the filesystems of the images the nodes run for
	// real (make node-images).
	ImagesDir string
	// SvcnetBinary runs the manager, and svcnet-agent beside it the agents (svcnet manager, svcnet-agent
	// agent); empty: svcnet beside this program.
	SvcnetBinary   string
	APIServerPort  int
	EtcdClientPort int
	EtcdPeerPort   int
	ServiceCIDRs   string
	Verbosity      int
	// Nodes is how many simulated nodes to run (0: the control plane
	// alone, no root needed).
	Nodes int
	// Zones is how many zones the nodes are spread over (node i in zone
	// (i-1) mod Zones, its Node labelled topology.kubernetes.io/zone);
	// 0: no zone label, as kind's nodes.
	Zones int
	// IPFamily is the simulated network's families (--ip-family): nodes,
	// Pods, client and router get an address of each; the range flags not
	// given take its defaults.
	IPFamily IPFamily
	// ClusterCIDR is split into one Pod CIDR per node (a /24, or a /64
	// for IPv6), one range a family of the network, comma separated.
	ClusterCIDR string
	// LoadBalancerRange backs a default LoadBalancerIPPool and is routed
	// from the client namespace through the nodes; empty: neither. One
	// range a family, comma separated.
	LoadBalancerRange string
	// LBAnnounce is how the client reaches LoadBalancer addresses:
	// AnnounceL2, AnnounceBGP or AnnounceRoutes.
	LBAnnounce Announce
	// Demo runs the walkthrough once everything is up.
	Demo bool
	// Pipeline is PipelineSvcnet, or PipelineUpstream to run
	// kube-controller-manager's own controllers and kube-proxy instead of
	// svcnet's, for side-by-side comparisons.
	Pipeline Pipeline
	// ProxyMode is the dataplane mode of every node's agent (or
	// kube-proxy): iptables or nftables.
	ProxyMode ProxyMode
	// DNS installs the cluster DNS add-on (CoreDNS behind kube-dns) when
	// there are nodes.
	DNS bool
	// Endpoints runs kube-controller-manager's Endpoints
	// controller and an EndpointSlice mirroring controller; false runs the
	// Endpoints-free cluster of KEP-4974 (--endpoints-controller=false).
	Endpoints bool
	// Install is InstallInProcess (the manager and the agents as this
	// program's children), or InstallManifests to apply config/default
	// and let the simulated nodes run it.
	Install Install
	// KubeProxy starts the cluster as a kubeadm cluster about to move to
	// svcnet: kube-proxy's DaemonSet, as kubeadm creates it, programs
	// every node, labelled svcnet.io/proxy=kube-proxy, svcnet's agents
	// stand by, and kube-controller-manager runs all its controllers
	// (docs/operations.md). Needs Install other than in-process.
	KubeProxy bool
	// MinSyncPeriod, when set, is every node proxy's minimum time
	// between syncs (--iptables-min-sync-period, the agent's and
	// kube-proxy's flag alike); unset, each runs at its own default
	// (the agent 0, kube-proxy 1 s), so that a comparison can run both
	// at the same one.
	MinSyncPeriod OptionalDuration

	Manager manager.Options
	// Out receives the progress lines and the commands to try.
	Out io.Writer
}

// Config is `svcnet up`'s settings once Complete checked them: the
// Options, with what a named cluster derives from its name, and the
// address ranges parsed. Run takes nothing else.
type Config struct {
	Options
	// choosePorts: a named cluster whose ports were not given chooses
	// free ones on its first start (resolvePorts).
	choosePorts bool
	ranges      ranges
}

// OptionalDuration is a duration flag that may be left unset.
type OptionalDuration struct {
	Value time.Duration
	IsSet bool
}

// String is the duration as given, "" when unset.
func (d *OptionalDuration) String() string {
	if !d.IsSet {
		return ""
	}
	return d.Value.String()
}

// Set parses a duration as time.ParseDuration does.
func (d *OptionalDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Value, d.IsSet = v, true
	return nil
}

// Type is the value's type in --help.
func (d *OptionalDuration) Type() string { return "duration" }

// Pipeline is --pipeline: whose Service networking runs.
type Pipeline string

// Pipelines (--pipeline).
const (
	PipelineSvcnet   Pipeline = "svcnet"
	PipelineUpstream Pipeline = "upstream"
)

// Pipelines are the values of --pipeline.
var Pipelines = []Pipeline{PipelineSvcnet, PipelineUpstream}

// ProxyMode is --proxy-mode: every node's dataplane mode.
type ProxyMode string

// ProxyModes are the values of --proxy-mode: the agent's modes, which
// kube-proxy has too.
var ProxyModes = []ProxyMode{agent.ModeIPTables, agent.ModeNFTables}

// ranges are the address flags as the session uses them, parsed once.
type ranges struct {
	// families are the simulated network's (--ip-family), the first
	// family first; cluster has one range of each, in that order.
	families []corev1.IPFamily
	services []netip.Prefix
	cluster  []netip.Prefix
	// loadBalancer is --load-balancer-ip-range; empty when it is.
	loadBalancer []netip.Prefix
	// kubeDNS is the kube-dns ClusterIP; invalid without the DNS add-on.
	kubeDNS netip.Addr
}

// DefaultOptions are `svcnet up` without flags.
func DefaultOptions() Options {
	m := manager.DefaultOptions()
	m.MetricsBindAddress = "0"
	m.HealthProbeBindAddress = "0"
	return Options{
		DataDir:           ".svcnet",
		APIServerPort:     6443,
		EtcdClientPort:    2379,
		EtcdPeerPort:      2380,
		ServiceCIDRs:      familyDefaults[IPFamilyIPv4].services,
		IPFamily:          IPFamilyIPv4,
		Nodes:             3,
		Zones:             3,
		Pipeline:          PipelineSvcnet,
		ProxyMode:         agent.ModeNFTables,
		DNS:               true,
		Endpoints:         true,
		Install:           InstallInProcess,
		ClusterCIDR:       familyDefaults[IPFamilyIPv4].cluster,
		LoadBalancerRange: familyDefaults[IPFamilyIPv4].loadBalancer,
		LBAnnounce:        AnnounceL2,
		Manager:           m,
		Out:               os.Stdout,
	}
}

// AddFlags binds the settings, and the manager's, to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Name, "name", o.Name, "Name of the cluster, as kind create cluster --name: its network namespaces are <name>-node-1 ..., its data dir defaults to .svcnet-<name>, and its ports, unless given, are chosen free on its first start and kept in its data dir, so that clusters run side by side. Empty: the default cluster (namespaces svcnet-*, or svcnet-2-* ... beside another).")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "Folder for etcd's data, credentials, logs and the kubeconfig; kept across runs.")
	fs.StringVar(&o.K8sBinDir, "k8s-bin-dir", o.K8sBinDir, "Folder with etcd, kube-apiserver and kube-controller-manager (make k8s-bins). Empty: $SVCNET_K8S_BIN_DIR, then k8s/ beside the svcnet binary, then ./bin/k8s.")
	fs.StringVar(&o.SvcnetBinary, "svcnet-binary", o.SvcnetBinary, "The svcnet binary that runs the manager (svcnet manager) as a child process; the node agents run from svcnet-agent beside it (svcnet-agent agent). Empty: svcnet beside this program (bin/svcnet, make build).")
	fs.StringVar(&o.ImagesDir, "images-dir", o.ImagesDir, "Folder with the image filesystems the simulated nodes run for real (make node-images). Empty: $SVCNET_IMAGES_DIR, then images/ beside the svcnet binary, then ./bin/images.")
	fs.IntVar(&o.APIServerPort, "apiserver-port", o.APIServerPort, "kube-apiserver's secure port on 127.0.0.1.")
	fs.IntVar(&o.EtcdClientPort, "etcd-client-port", o.EtcdClientPort, "etcd's client port on 127.0.0.1.")
	fs.IntVar(&o.EtcdPeerPort, "etcd-peer-port", o.EtcdPeerPort, "etcd's peer port on 127.0.0.1.")
	fs.StringVar(&o.ServiceCIDRs, "service-cluster-ip-range", o.ServiceCIDRs, "Service IP range(s), comma separated (one per family), as kube-apiserver's flag; the first is of --ip-family's first family. Default: --ip-family's (10.96.0.0/16, fd00:10:96::/112, or both).")
	fs.Var(enumflag.Var(&o.IPFamily, "family"), "ip-family", "Families of the simulated network, as kind's ipFamily: ipv4, ipv6 or dual (IPv4 first, unless the first --service-cluster-ip-range is IPv6). Nodes, Pods, the client and the router get an address of each; the range flags not given take the family's defaults.")
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "Simulated nodes: each a network namespace with a svcnet agent, Pods getting namespaces of their own (needs root); 0 runs the control plane alone.")
	fs.IntVar(&o.Zones, "zones", o.Zones, fmt.Sprintf("Zones the nodes are spread over: node N's Node is labelled topology.kubernetes.io/zone=zone-<a+(N-1) mod zones>, for topology-aware routing and its tests; 0: no zone label (as kind's nodes); at most %d.", maxZones))
	fs.StringVar(&o.ClusterCIDR, "cluster-cidr", o.ClusterCIDR, "Pod range(s) of the simulated nodes, one of each --ip-family, comma separated; node N gets its N-th /24 (IPv4) and /64 (IPv6). Default: --ip-family's (10.244.0.0/16, fd00:10:244::/56, or both).")
	fs.StringVar(&o.LoadBalancerRange, "load-balancer-ip-range", o.LoadBalancerRange, "CIDR(s) of the LoadBalancerIPPool svcnet-up, at most one of each --ip-family, comma separated, created once and routed from the client namespace through the nodes; empty: no pool. Default: --ip-family's (192.168.240.0/24, fd00:192:168:240::/120, or both).")
	fs.Var(enumflag.Var(&o.LBAnnounce, "announce"), "lb-announce", "How the client reaches LoadBalancer IPs: l2 (it is on the nodes' segment with the range on its link; one node answers ARP for each address), bgp (a router namespace runs FRR, peering with every node, ECMP; it is the client's gateway), or routes (a static route through every node).")
	fs.Var(enumflag.Var(&o.Pipeline, "pipeline"), "pipeline", "Whose Service networking runs: svcnet (its manager, and an agent per node), or upstream (kube-controller-manager's own EndpointSlice and ServiceCIDR controllers, kube-apiserver's allocators and kube-proxy per node; no LoadBalancer IPs), to compare the two on the same machine.")
	fs.Var(enumflag.Var(&o.ProxyMode, "mode"), "proxy-mode", "Dataplane of every node: nftables or iptables (svcnet agent --mode, or kube-proxy --proxy-mode under --pipeline=upstream). nftables, the default, is the one whose changes cost the same at any number of Services (docs/BENCHMARKS.md).")
	fs.BoolVar(&o.DNS, "dns", o.DNS, "Install cluster DNS with the nodes: CoreDNS (bin/k8s/coredns, run by the node simulator) behind kube-dns at the tenth address of the first Service range, and a resolver for the client and node namespaces (ip netns exec ... curl http://web/).")
	fs.Var(enumflag.Var(&o.Install, "install"), "install", "How svcnet runs: in-process (the manager and an agent per node run by svcnet up from the svcnet binary), manifests (config/default applied with kustomize: the manager Deployment, 2 replicas behind leader election, and the agent DaemonSet run by the simulated nodes from svcnet's images, make images), or helm (charts/svcnet installed with helm, make helm).")
	fs.BoolVar(&o.KubeProxy, "kube-proxy", o.KubeProxy, "Start as a kubeadm cluster about to move from kube-proxy and kube-controller-manager's controllers (with --install=manifests or helm): kube-proxy's DaemonSet as kubeadm creates it (bin/k8s/kube-proxy, in --proxy-mode) programs every node, each labelled svcnet.io/proxy=kube-proxy, svcnet's agents stand by, and kube-controller-manager runs all its controllers (its flags in <data-dir>/kube-controller-manager.flags, which restarts it when edited); docs/operations.md's steps then move the controllers and the nodes.")
	fs.Var(&o.MinSyncPeriod, "min-sync-period", "Every node proxy's minimum time between syncs: --iptables-min-sync-period of the agents, or of kube-proxy under --pipeline=upstream, so that both pipelines can run at the same one. Unset: each proxy's own default (the agent 0, kube-proxy 1s).")
	fs.BoolVar(&o.Endpoints, "endpoints-controller", o.Endpoints, "Run kube-controller-manager's endpoints-controller and an EndpointSlice mirroring controller (svcnet's, or kube-controller-manager's under --pipeline=upstream); false: neither, the Endpoints-free cluster of KEP-4974, where nothing writes or mirrors Endpoints objects.")
	fs.BoolVar(&o.Demo, "demo", o.Demo, "Run the walkthrough (Deployment, every Service type, scaling, traffic) once everything is up, printing each command and its output.")
	o.Manager.AddFlags(fs)
}

// Complete checks the settings into a Config, naming every bad flag at
// once: a named cluster's data dir and ports derived from its name
// unless fs says they were given (nil: as given when they differ from
// the defaults), and the address ranges parsed once.
func (o *Options) Complete(fs *pflag.FlagSet) (Config, error) {
	c := Config{Options: *o}
	c.choosePorts = c.deriveFromName(fs)
	c.applyFamilyDefaults(fs)
	r, err := c.check()
	if err != nil {
		return Config{}, err
	}
	c.ranges = r
	return c, nil
}

// check checks the settings, naming each bad flag, and parses the
// address ranges.
func (o *Options) check() (ranges, error) {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if err := validateName(o.Name); err != nil {
		errs = append(errs, err)
	}
	for flag, port := range map[string]int{"--apiserver-port": o.APIServerPort, "--etcd-client-port": o.EtcdClientPort, "--etcd-peer-port": o.EtcdPeerPort} {
		if port < 1 || port > 65535 {
			errs = append(errs, fmt.Errorf("%s must be between 1 and 65535, got %d", flag, port))
		}
	}
	if _, err := portrange.ParseRange(o.Manager.Controllers.NodePort.Range); err != nil {
		errs = append(errs, fmt.Errorf("--service-node-port-range: %w", err))
	}
	if _, err := o.Manager.Complete(); err != nil {
		errs = append(errs, err)
	}
	r, rangeErrs := o.parseRanges()
	errs = append(errs, o.validateNodes()...)
	errs = append(errs, rangeErrs...)
	return r, errors.Join(errs...)
}

// validateNodes checks the simulated cluster's flags.
func (o *Options) validateNodes() []error {
	var errs []error
	if o.Nodes < 0 || o.Nodes > 50 {
		errs = append(errs, fmt.Errorf("--nodes must be between 0 and 50, got %d", o.Nodes))
	}
	if o.Zones < 0 || o.Zones > maxZones {
		errs = append(errs, fmt.Errorf("--zones must be between 0 and %d, got %d", maxZones, o.Zones))
	}
	for _, err := range []error{
		enumflag.Check("pipeline", o.Pipeline, Pipelines),
		enumflag.Check("proxy-mode", o.ProxyMode, ProxyModes),
		enumflag.Check("lb-announce", o.LBAnnounce, Announces),
		enumflag.Check("install", o.Install, Installs),
		enumflag.Check("ip-family", o.IPFamily, IPFamilies),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if o.Install != InstallInProcess && (o.Nodes < 1 || o.Pipeline != PipelineSvcnet) {
		errs = append(errs, fmt.Errorf("--install=%s needs nodes to run the manifests (--nodes) and --pipeline=svcnet", o.Install))
	}
	if o.KubeProxy && o.Install == InstallInProcess {
		errs = append(errs, errors.New("--kube-proxy needs svcnet installed as a cluster installs it, beside kube-proxy's DaemonSet: --install=manifests or helm"))
	}
	if o.MinSyncPeriod.IsSet && (o.MinSyncPeriod.Value < 0 || o.Install != InstallInProcess) {
		errs = append(errs, fmt.Errorf("--min-sync-period must be 0 or more and applies to the node proxies svcnet up runs itself (--install=in-process), got %s with --install=%s", &o.MinSyncPeriod, o.Install))
	}
	if o.Demo && o.Nodes < 1 {
		errs = append(errs, errors.New("--demo needs at least one node (--nodes)"))
	}
	return errs
}

// parseRanges parses the address flags and checks that the ranges do
// not overlap each other or the simulated fabric, and that they fit
// --ip-family.
func (o *Options) parseRanges() (ranges, []error) {
	var r ranges
	var errs []error
	taken := map[string]netip.Prefix{}
	for f, p := range fabricCIDRs {
		taken["the simulated fabric's "+string(f)+" range"] = p
	}
	svcs, err := parseCIDRs("--service-cluster-ip-range", o.ServiceCIDRs)
	if err != nil {
		errs = append(errs, err)
	}
	r.services = svcs
	for _, p := range svcs {
		taken["--service-cluster-ip-range "+p.String()] = p
	}
	r.families = networkFamilies(o.IPFamily, svcs)
	if err := checkServiceFamilies(o.IPFamily, r.families, svcs); err != nil {
		errs = append(errs, err)
	}
	if o.DNS && o.Nodes > 0 && len(svcs) > 0 {
		if r.kubeDNS, err = addons.KubeDNSIP(svcs); err != nil {
			errs = append(errs, err)
		}
	}
	if r.cluster, err = o.parseClusterCIDRs(r.families); err != nil {
		errs = append(errs, err)
	}
	for _, p := range r.cluster {
		errs = append(errs, overlaps("--cluster-cidr", p, taken)...)
		taken["--cluster-cidr "+p.String()] = p
	}
	if r.loadBalancer, err = o.parseLoadBalancerRanges(r.families); err != nil {
		errs = append(errs, err)
	}
	for _, p := range r.loadBalancer {
		errs = append(errs, overlaps("--load-balancer-ip-range", p, taken)...)
	}
	return r, errs
}

// parseClusterCIDRs parses --cluster-cidr: one range of each of the
// network's families, each with a Pod CIDR for every node.
func (o *Options) parseClusterCIDRs(families []corev1.IPFamily) ([]netip.Prefix, error) {
	ps, err := parseCIDRs("--cluster-cidr", o.ClusterCIDR)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if err := checkClusterCIDR(p, o.Nodes); err != nil {
			return nil, err
		}
	}
	if families == nil {
		return ps, nil
	}
	return inFamilies("--cluster-cidr", ps, families)
}

// parseLoadBalancerRanges parses --load-balancer-ip-range: empty, or at
// most one range of each of the network's families.
func (o *Options) parseLoadBalancerRanges(families []corev1.IPFamily) ([]netip.Prefix, error) {
	if o.LoadBalancerRange == "" {
		return nil, nil
	}
	ps, err := parseCIDRs("--load-balancer-ip-range", o.LoadBalancerRange)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if families != nil && !slices.Contains(families, ipfamily.OfPrefix(p)) {
			return nil, fmt.Errorf("--load-balancer-ip-range %s: the network has no %s (--ip-family=%s)", p, ipfamily.OfPrefix(p), o.IPFamily)
		}
	}
	return ps, nil
}

func overlaps(flag string, p netip.Prefix, others map[string]netip.Prefix) []error {
	var errs []error
	for name, o := range others {
		if p.Overlaps(o) {
			errs = append(errs, fmt.Errorf("%s %s overlaps %s (%s)", flag, p, name, o))
		}
	}
	return errs
}

// binaries are the upstream programs `svcnet up` runs.
var binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager"}

// upstreamNodeBinary runs on every node with --pipeline=upstream.
const upstreamNodeBinary = "kube-proxy"

// findBinDir resolves the folder holding the Kubernetes binaries and checks
// that each one is there.
func (o *Options) findBinDir() (string, error) {
	candidates := []string{o.K8sBinDir}
	if o.K8sBinDir == "" {
		candidates = []string{os.Getenv("SVCNET_K8S_BIN_DIR")}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), "k8s"))
		}
		candidates = append(candidates, filepath.Join("bin", "k8s"))
	}
	var missing []string
	for _, dir := range candidates {
		if dir == "" {
			continue
		}
		m := missingBinary(dir)
		if m == "" {
			return filepath.Abs(dir)
		}
		missing = append(missing, m)
	}
	return "", fmt.Errorf("missing Kubernetes binary %s: run `make k8s-bins` to build them (nothing is downloaded)", strings.Join(missing, ", "))
}

// findSvcnetBinaries resolves the svcnet binary that runs the manager
// (--svcnet-binary, or svcnet beside this program) and svcnet-agent
// beside it, which runs the agents.
func (o *Options) findSvcnetBinaries() (svcnet, agent string, err error) {
	if svcnet, err = o.findSvcnetBinary(); err != nil {
		return "", "", err
	}
	agent = filepath.Join(filepath.Dir(svcnet), "svcnet-agent")
	if !executable(agent) {
		return "", "", fmt.Errorf("missing the node agent's binary %s beside %s: run `make build`", agent, svcnet)
	}
	return svcnet, agent, nil
}

// findSvcnetBinary resolves the svcnet binary that runs the manager:
// --svcnet-binary, or svcnet beside this program.
func (o *Options) findSvcnetBinary() (string, error) {
	path := o.SvcnetBinary
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the svcnet binary beside this program: %w", err)
		}
		path = filepath.Join(filepath.Dir(exe), "svcnet")
	}
	if !executable(path) {
		return "", fmt.Errorf("missing the svcnet binary %s, which runs the manager: run `make build`, or give its path with --svcnet-binary", path)
	}
	return filepath.Abs(path)
}

// missingBinary returns the first binary not executable in dir, or "".
func missingBinary(dir string) string {
	for _, b := range binaries {
		if p := filepath.Join(dir, b); !executable(p) {
			return p
		}
	}
	return ""
}

// Run starts everything, prints what to try, and blocks until ctx ends or a
// component fails; either way every child is stopped before it returns.
// c comes from Options.Complete.
func Run(ctx context.Context, c Config) error {
	if len(c.ranges.services) == 0 {
		return errors.New("svcnet up: the Config was not completed (Options.Complete)")
	}
	s := &session{cfg: c, out: c.Out, failed: make(chan *process, 4)}
	if s.out == nil {
		s.out = io.Discard
	}
	defer s.stopProcesses()
	unlock, err := s.preflight()
	if err != nil {
		return err
	}
	defer unlock()
	slog, err := os.OpenFile(filepath.Join(s.logs, simulatorLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer slog.Close()
	s.useLog(slog)
	if err := s.startControlPlane(ctx); err != nil {
		return err
	}
	if err := s.startManager(ctx); err != nil {
		return err
	}
	if err := s.startNodesAndTour(ctx); err != nil {
		return err
	}
	defer func() {
		if s.cluster != nil {
			s.cluster.stop()
		}
	}()
	return s.wait(ctx)
}

// session is one `svcnet up` run: what its phases set up and hand on.
type session struct {
	cfg    Config
	out    io.Writer
	binDir string
	// svcnetBin runs the manager, agentBin the agents.
	svcnetBin, agentBin string
	// dataDir holds the state; logs its log files.
	dataDir, logs string
	pk            *controlplane.PKI
	upstream      bool
	// manifests: --install=manifests or helm.
	manifests bool

	// procs are the control plane's supervised children (the svcnet
	// manager last), stopped in reverse order; failed receives any that
	// keeps failing.
	procs  []*supervised
	failed chan *process

	etcdURL    string
	kubeconfig string
	restCfg    *rest.Config
	admin      client.Client
	// logger writes the simulator's own log (nodes, kubelets, scheduler).
	logger  logr.Logger
	cluster *cluster
}

// preflight checks what `svcnet up` needs before it starts anything:
// binaries, network namespace support, a free data dir and free ports,
// credentials. The returned function releases the data dir.
func (s *session) preflight() (unlock func(), err error) {
	c := s.cfg
	if s.binDir, err = c.findBinDir(); err != nil {
		return nil, err
	}
	if c.Nodes > 0 {
		if err := checkNetnsSupport(c.ProxyMode); err != nil {
			return nil, err
		}
	}
	s.upstream = c.Pipeline == PipelineUpstream
	s.manifests = c.Install == InstallManifests || c.Install == InstallHelm
	if !s.upstream && !s.manifests {
		if s.svcnetBin, s.agentBin, err = c.findSvcnetBinaries(); err != nil {
			return nil, err
		}
	}
	if s.manifests {
		if p := filepath.Join(s.binDir, "kubectl"); !executable(p) {
			return nil, fmt.Errorf("missing %s, which builds config/default for --install=manifests: run `make k8s-bins`", p)
		}
	}
	if c.DNS && c.Nodes > 0 {
		if p := filepath.Join(s.binDir, "coredns"); !executable(p) {
			return nil, fmt.Errorf("missing %s for the cluster DNS add-on: run `make k8s-bins`, or turn DNS off with --dns=false", p)
		}
	}
	if (s.upstream && c.Nodes > 0) || c.KubeProxy {
		if p := filepath.Join(s.binDir, upstreamNodeBinary); !executable(p) {
			return nil, fmt.Errorf("missing Kubernetes binary %s for --pipeline=upstream or --kube-proxy: run `make k8s-bins`", p)
		}
	}
	if s.dataDir, err = prepareDataDir(c.DataDir); err != nil {
		return nil, err
	}
	if unlock, err = lockDataDir(s.dataDir); err != nil {
		return nil, err
	}
	if err := s.resolvePorts(); err != nil {
		unlock()
		return nil, err
	}
	if err := s.prepare(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// prepare checks the ports and writes credentials and the log folder.
func (s *session) prepare() error {
	c := s.cfg
	for _, pc := range []struct {
		name string
		port int
	}{{"kube-apiserver (--apiserver-port)", c.APIServerPort}, {"etcd (--etcd-client-port)", c.EtcdClientPort}, {"etcd (--etcd-peer-port)", c.EtcdPeerPort}, {"the admission webhook (--webhook-port)", c.Manager.Webhook.Port}} {
		if err := portFree(pc.port); err != nil {
			return fmt.Errorf("port %d for %s is already in use: %w", pc.port, pc.name, err)
		}
	}
	firstIP := c.ranges.services[0].Addr().Next()
	s.pk = controlplane.NewPKI(s.dataDir)
	if err := s.pk.Ensure(net.IP(firstIP.AsSlice()), addrs(c.fabricAddrs(fabricHost))...); err != nil {
		return fmt.Errorf("preparing credentials in %s: %w", s.pk.Dir, err)
	}
	s.logs = filepath.Join(s.dataDir, "logs")
	return os.MkdirAll(s.logs, 0o755)
}

// stopProcesses stops the processes the session started, the last first.
func (s *session) stopProcesses() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop(10 * time.Second)
	}
}

// startControlPlane starts etcd, kube-apiserver (and writes the admin
// kubeconfig) and kube-controller-manager.
func (s *session) startControlPlane(ctx context.Context) error {
	if err := s.startEtcd(ctx); err != nil {
		return err
	}
	if err := s.startAPIServer(ctx); err != nil {
		return err
	}
	return s.startControllerManager()
}

func (s *session) startEtcd(ctx context.Context) error {
	c := s.cfg
	s.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", c.EtcdClientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPeerPort)
	_, etcd, err := s.supervise("etcd", filepath.Join(s.binDir, "etcd"), []string{
		"--name=svcnet", "--data-dir=" + filepath.Join(s.dataDir, "etcd"),
		"--listen-client-urls=" + s.etcdURL, "--advertise-client-urls=" + s.etcdURL,
		"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=svcnet=" + peerURL, "--log-level=warn",
	}, filepath.Join(s.logs, "etcd.log"))
	if err != nil {
		return err
	}
	if err := controlplane.WaitReady(ctx, etcd, s.etcdURL+"/health", nil, "", 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "etcd ready on %s\n", s.etcdURL)
	return nil
}

func (s *session) startAPIServer(ctx context.Context) error {
	c, pk := s.cfg, s.pk
	apiURL := fmt.Sprintf("https://127.0.0.1:%d", c.APIServerPort)
	extra, err := s.clusterAPIServerFlags()
	if err != nil {
		return err
	}
	_, apiserver, err := s.supervise("kube-apiserver", filepath.Join(s.binDir, "kube-apiserver"), append([]string{
		"--etcd-servers=" + s.etcdURL,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", c.APIServerPort),
		"--service-cluster-ip-range=" + c.ServiceCIDRs,
		"--service-node-port-range=" + c.Manager.Controllers.NodePort.Range,
		"--tls-cert-file=" + pk.ServingCert, "--tls-private-key-file=" + pk.ServingKey,
		"--client-ca-file=" + pk.CACert, "--token-auth-file=" + pk.TokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk.SAPub, "--service-account-signing-key-file=" + pk.SAKey,
		"--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--cert-dir=" + filepath.Join(s.dataDir, "apiserver-certs"),
	}, extra...), filepath.Join(s.logs, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(pk.CACert)
	if err != nil {
		return err
	}
	if err := controlplane.WaitReady(ctx, apiserver, apiURL+"/readyz", caPEM, pk.AdminToken, 120*time.Second); err != nil {
		return err
	}
	s.kubeconfig = filepath.Join(s.dataDir, "kubeconfig")
	if err := controlplane.WriteKubeconfig(s.kubeconfig, apiURL, caPEM, pk.AdminToken); err != nil {
		return fmt.Errorf("writing %s: %w", s.kubeconfig, err)
	}
	if s.restCfg, err = clientcmd.BuildConfigFromFlags("", s.kubeconfig); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "kube-apiserver ready on %s\n", apiURL)
	return nil
}

// clusterAPIServerFlags are the API server's flags for its place in the
// simulated cluster. With nodes it is advertised at the fabric address
// (which forwards to it) and keeps the kubernetes Service's Endpoints and
// EndpointSlice itself; its cluster traffic (Pods and Services through
// the proxy subresources, the kubelets' API, webhooks behind Services)
// goes into the fabric through the egress proxy; it reaches the kubelets
// at their InternalIP with a client certificate and checks theirs. Alone
// (--nodes=0) it advertises loopback and keeps no endpoints.
func (s *session) clusterAPIServerFlags() ([]string, error) {
	if s.cfg.Nodes == 0 {
		return []string{"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}, nil
	}
	path, err := s.writeEgressSelector()
	if err != nil {
		return nil, err
	}
	return []string{
		"--advertise-address=" + s.cfg.apiServerAddr().String(), "--endpoint-reconciler-type=lease",
		"--egress-selector-config-file=" + path,
		"--kubelet-client-certificate=" + s.pk.KubeletClientCert, "--kubelet-client-key=" + s.pk.KubeletClientKey,
		"--kubelet-certificate-authority=" + s.pk.CACert,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
	}, nil
}

// startControllerManager starts kube-controller-manager with the flags it
// also writes to kcmFlagsFile, and restarts it when that file changes.
// With --kube-proxy it runs every controller, as kubeadm runs it, until
// the move hands svcnet the ones it replaces.
func (s *session) startControllerManager() error {
	const name = "kube-controller-manager"
	kcmControllers, kcmNote := kcmControllerList(s.upstream || s.cfg.KubeProxy, s.cfg.Endpoints)
	if s.cfg.KubeProxy {
		kcmNote = "all its controllers, as kubeadm runs it: --kube-proxy"
	}
	args := []string{
		"--kubeconfig=" + s.kubeconfig,
		"--controllers=" + kcmControllers,
		"--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file=" + s.pk.SAKey, "--root-ca-file=" + s.pk.CACert,
		"--use-service-account-credentials=false",
		"--service-cluster-ip-range=" + s.cfg.ServiceCIDRs,
	}
	flags := filepath.Join(s.dataDir, kcmFlagsFile)
	if err := writeFlagsFile(flags, name, args); err != nil {
		return err
	}
	sv, _, err := s.supervise(name, filepath.Join(s.binDir, name), args, filepath.Join(s.logs, name+".log"))
	if err != nil {
		return err
	}
	go followFlagsFile(flags, sv, s.out, time.Second)
	fmt.Fprintf(s.out, "kube-controller-manager started (%s); its flags are in %s, which restarts it when edited\n", kcmNote, flags)
	return nil
}

// startManager installs the CRDs and starts `svcnet manager` as a
// supervised child, with its webhook on loopback, and waits until it is
// ready; under --pipeline=upstream it removes the webhook and starts no
// manager, and with --install=manifests the simulated nodes run it.
func (s *session) startManager(ctx context.Context) error {
	sch := scheme.New()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		return err
	}
	admin, err := client.New(s.restCfg, client.Options{Scheme: sch})
	if err != nil {
		return err
	}
	s.admin = admin
	if s.manifests {
		// The manifests bring the CRDs and the webhook configuration.
		return nil
	}
	if err := svcnetconfig.InstallCRDs(ctx, admin); err != nil {
		return err
	}
	if s.upstream {
		return svcnetconfig.RemoveWebhook(ctx, admin)
	}
	mopts := s.cfg.Manager
	if controllers.NeedsWebhook(mopts.Controllers.Controllers) {
		if err := svcnetconfig.InstallWebhook(ctx, admin, fmt.Sprintf("https://127.0.0.1:%d", mopts.Webhook.Port)); err != nil {
			return fmt.Errorf("installing the admission webhook: %w", err)
		}
	}
	health, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	_, p, err := s.supervise(managerProcess, s.svcnetBin, s.managerArgs(health), filepath.Join(s.logs, "svcnet-manager.log"))
	if err != nil {
		return err
	}
	if err := controlplane.WaitReady(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", health), nil, "", 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(s.out, "svcnet manager started (logs in %s)\n", s.logs)
	if enabled, _ := controllers.Enabled(mopts.Controllers.Controllers); len(s.cfg.ranges.loadBalancer) > 0 && enabled[controllers.LoadBalancerName] {
		return ensureDefaultPool(ctx, admin, s.cfg)
	}
	return nil
}

// managerProcess names the manager child in progress lines and errors.
const managerProcess = "svcnet manager"

// simulatorLog is the simulator's own log file in the logs folder.
const simulatorLog = "svcnet-up.log"

// useLog sends the simulator's own logging, and that of the libraries
// logging through klog or controller-runtime's global logger, to w, not
// over the tour on stdout.
func (s *session) useLog(w io.Writer) {
	s.logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(w), textlogger.Verbosity(s.cfg.Verbosity)))
	klog.SetLogger(s.logger)
	ctrl.SetLogger(s.logger)
}

// managerArgs are `svcnet manager`'s arguments for this machine: the
// manager flags given to svcnet up, then its webhook on loopback with
// svcnet's own certificates (kept in kube-system and the data dir), its
// probes on the given loopback port, and the session's verbosity.
func (s *session) managerArgs(healthPort int) []string {
	args := append([]string{"manager"}, managerFlags(s.managerOptions())...)
	return append(args,
		"--kubeconfig="+s.kubeconfig,
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(healthPort),
		"--webhook-host=127.0.0.1",
		"--webhook-cert-dir="+filepath.Join(s.dataDir, "webhook"),
		"--webhook-cert-management="+string(manager.CertManagementSelf),
		"--webhook-secret-namespace=kube-system",
		"--webhook-cert-extra-hosts=127.0.0.1",
		"-v="+strconv.Itoa(s.cfg.Verbosity),
	)
}

// managerOptions are the manager flags given to svcnet up, without the
// EndpointSlice mirroring controller in an Endpoints-free cluster.
func (s *session) managerOptions() manager.Options {
	mopts := s.cfg.Manager
	if !s.cfg.Endpoints {
		mopts.Controllers.Controllers = append(slices.Clone(mopts.Controllers.Controllers), "-"+controllers.EndpointSliceMirroringName)
	}
	return mopts
}

// kcmControllerList is kube-controller-manager's --controllers, and how
// the progress line describes it: svcnet's pipeline turns off the
// controllers svcnet replaces, and without the Endpoints controller
// (KEP-4974) that one and the mirroring one are off in either pipeline.
func kcmControllerList(upstream, endpointsController bool) (list, note string) {
	switch {
	case upstream && endpointsController:
		return "*", "all its controllers: --pipeline=upstream"
	case upstream:
		return "*,-endpoints-controller,-endpointslice-mirroring-controller",
			"--pipeline=upstream without its endpoints and endpointslice-mirroring controllers: --endpoints-controller=false"
	case endpointsController:
		return "*,-endpointslice-controller,-endpointslice-mirroring-controller,-service-cidr-controller",
			"its endpointslice, endpointslice-mirroring and service-cidr controllers off"
	}
	return "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller,-service-cidr-controller",
		"its endpoints, endpointslice, endpointslice-mirroring and service-cidr controllers off: --endpoints-controller=false"
}

// startNodesAndTour starts the simulated nodes, prints the tour and runs
// the walkthrough when asked.
func (s *session) startNodesAndTour(ctx context.Context) error {
	c := s.cfg
	if c.Nodes > 0 {
		cl, err := startCluster(logr.NewContext(ctx, s.logger), s)
		if err != nil {
			return fmt.Errorf("starting the simulated nodes: %w", err)
		}
		s.cluster = cl
		fmt.Fprintf(s.out, "%d nodes up, each with %s (namespaces %s-node-*, client %s)\n", len(cl.nodes), cl.proxyName, cl.prefix, cl.client)
		if c.DNS {
			// The tour's first request is by name: it is printed once
			// kube-dns answers (CoreDNS's first readiness probe comes a
			// probe period after it starts, as a kubelet's does).
			if err := addons.WaitDNS(ctx, s.admin, addons.DNSReadyTimeout); err != nil {
				fmt.Fprintf(s.out, "%s: NOT READY (%v; its logs are in %s)\n", addons.DNSLine(cl.dnsIP), err, filepath.Join(s.logs, "pods"))
			} else {
				fmt.Fprintln(s.out, addons.DNSLine(cl.dnsIP))
			}
		}
	}
	fmt.Fprintln(s.out)
	printTour(s.out, s.binDir, s.kubeconfig, s.cluster)
	if c.Demo {
		if err := walkthrough.Run(ctx, s.walkthroughCluster()); err != nil && ctx.Err() == nil {
			return fmt.Errorf("the walkthrough failed: %w", err)
		}
	}
	return nil
}

// walkthroughCluster is what the walkthrough (--demo) uses of the
// session and its simulated cluster.
func (s *session) walkthroughCluster() walkthrough.Cluster {
	cl := s.cluster
	w := walkthrough.Cluster{
		Out: s.out, BinDir: s.binDir, Kubeconfig: s.kubeconfig, Client: s.admin,
		ClientNetNS: cl.client, Mode: string(cl.mode), KubeProxy: cl.proxyName == "kube-proxy", DNSIP: cl.dnsIP,
	}
	for _, n := range cl.nodes {
		w.Nodes = append(w.Nodes, walkthrough.Node{Name: n.Name, NetNS: n.Net.NetNS, IP: n.Net.IP})
	}
	return w
}

// wait blocks until ctx ends or a supervised child keeps failing (the
// nodes' agents are restarted for as long as they fail).
func (s *session) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		fmt.Fprintln(s.out, "\nStopping svcnet up")
		return nil
	case p := <-s.failed:
		return p.Failure()
	}
}

func printTour(out io.Writer, binDir, kubeconfig string, cl *cluster) {
	fmt.Fprintf(out, `The control plane is up. Try:
  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl get servicecidrs,ipaddresses
  kubectl create deployment nginx --image=nginx --replicas=3
  kubectl expose deployment nginx --name=my-service --port=80
  kubectl run curl --rm -i --restart=Never --image=busybox:1.36 -- wget -q -O - http://my-service
  kubectl get ipaddresses
  kubectl get endpointslices -l kubernetes.io/service-name=my-service
  kubectl exec deploy/nginx -- nginx -v; kubectl logs -l app=nginx
`, kubeconfig, binDir)
	if cl != nil {
		defer fmt.Fprint(out, announceTour(cl))
		fmt.Fprintf(out, `  kubectl get nodes,pods -o wide
  ip netns list                                   # %[1]s-node-*, %[1]s-client, a namespace per Pod
  ip netns exec %[2]s curl -s http://<cluster-ip>/   # the client, outside the nodes, reaches Services
  ip netns exec %[3]s %[4]s
`, cl.prefix, cl.client, cl.nodes[0].Net.NetNS, rulesCommand(cl.mode, cl.proxyName == "kube-proxy", ipfamily.Of(cl.nodes[0].Net.IP)))
		if cl.dnsIP.IsValid() {
			fmt.Fprintf(out, `  ip netns exec %[1]s curl -s http://my-service/ # by name, through cluster DNS (kube-dns %[2]s)
  ip netns exec %[1]s getent hosts my-service
`, cl.client, cl.dnsIP)
		}
	}
	fmt.Fprintln(out, "Ctrl-C stops everything.")
}

// prepareDataDir creates the data dir and proves it is writable.
func prepareDataDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("--data-dir %s cannot be created: %w", dir, err)
	}
	probe := filepath.Join(abs, ".write-test")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return "", fmt.Errorf("--data-dir %s is not writable: %w", dir, err)
	}
	_ = os.Remove(probe)
	return abs, nil
}

// lockDataDir makes sure only one `svcnet up` uses a data dir.
func lockDataDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("--data-dir %s is in use by another svcnet up", dir)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

func portFree(port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return err
	}
	return l.Close()
}
