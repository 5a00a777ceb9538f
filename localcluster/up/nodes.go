// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/kubeadm"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim"
)

// maxZones bounds --zones: zone-a to zone-z.
const maxZones = 26

// zoneOf is the zone of node i (1-based) when the nodes are spread over
// zones zones (--zones): zone-a, zone-b, ... in turn; "" (no zone label)
// when zones is 0.
func zoneOf(i, zones int) string {
	if zones <= 0 {
		return ""
	}
	return "zone-" + string(rune('a'+(i-1)%zones))
}

// cluster is the simulated part of `svcnet up`: the network namespaces,
// the node simulator and one agent per node.
type cluster struct {
	prefix string
	unlock func()
	lab    *netlab.Lab
	nodes  []nodesim.Node
	client string
	// mode is the nodes' dataplane mode (--proxy-mode).
	mode ProxyMode
	// dnsIP is kube-dns's address; invalid without --dns.
	dnsIP netip.Addr
	// proxyName names what programs each node: svcnet agent or kube-proxy.
	proxyName string
	// agents run each node's svcnet agent (or kube-proxy) from agentBin,
	// restarted with back-off when they exit; out hears of each restart,
	// events records it on the Node, and failed hears of an agent that
	// cannot be started again.
	agents   []*supervised
	agentBin string
	out      io.Writer
	events   client.Client
	failed   chan<- *process
	// lbAnnounce, router and frr: how the client reaches LoadBalancer
	// addresses (announce.go).
	lbAnnounce Announce
	router     string
	frr        *frr.Router
	stopSim    context.CancelFunc
	simDone    chan struct{} // closed when the simulator's manager returned
	simErr     error
}

// netnsLockDir holds one lock file per namespace prefix in use.
const netnsLockDir = "/run/svcnet"

// claimPrefix picks the namespace prefix for this run: the cluster's
// name, or for the default cluster "svcnet", or "svcnet-2" ... when
// another `svcnet up` holds it. The prefix is held by a lock for the life
// of the process, so leftovers of a crashed run under a free prefix are
// removed here.
func claimPrefix(name string) (string, func(), []string, error) {
	if err := os.MkdirAll(netnsLockDir, 0o755); err != nil {
		return "", nil, nil, err
	}
	candidates := []string{name}
	if name == "" {
		candidates = []string{"svcnet"}
		for i := 2; i <= 9; i++ {
			candidates = append(candidates, fmt.Sprintf("svcnet-%d", i))
		}
	}
	for _, prefix := range candidates {
		f, err := os.OpenFile(filepath.Join(netnsLockDir, prefix+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return "", nil, nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		unlock := func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }
		removed, err := netlab.CleanStale(prefix)
		if err != nil {
			unlock()
			return "", nil, nil, fmt.Errorf("removing namespaces left by an earlier svcnet up: %w", err)
		}
		return prefix, unlock, removed, nil
	}
	if name != "" {
		return "", nil, nil, fmt.Errorf("a cluster named %q is already running on this machine", name)
	}
	return "", nil, nil, errors.New("nine svcnet up are already running on this machine")
}

// checkNetnsSupport fails early, with the reason, when this process cannot
// create network namespaces.
func checkNetnsSupport(mode ProxyMode) error {
	tools := []string{"ip", "iptables-restore"}
	if mode == agent.ModeNFTables {
		tools = append(tools, "nft")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--nodes needs %s (packages iproute2, iptables, nftables); use --nodes=0 for the control plane alone", tool)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("--nodes needs root to create network namespaces; run as root, or use --nodes=0 for the control plane alone")
	}
	return nil
}

// startCluster builds the network, registers and runs the nodes, and
// starts an agent in each. On error, what was made is removed.
func startCluster(ctx context.Context, s *session) (_ *cluster, err error) {
	c, out := s.cfg, s.out
	prefix, unlock, removed, err := claimPrefix(c.Name)
	if err != nil {
		return nil, err
	}
	if len(removed) > 0 {
		fmt.Fprintf(out, "removed %d network namespaces left by an earlier run\n", len(removed))
	}
	cl := &cluster{prefix: prefix, unlock: unlock, mode: c.ProxyMode, lbAnnounce: c.LBAnnounce,
		agentBin: s.agentBin, out: out, events: s.admin, failed: s.failed}
	if c.DNS {
		cl.dnsIP = c.ranges.kubeDNS
	}
	defer func() {
		if err != nil {
			cl.stop()
		}
	}()
	if err := cl.buildNetwork(c); err != nil {
		return nil, err
	}
	if err := cl.exposeAPIServer(c); err != nil {
		return nil, err
	}
	if err := cl.startEgress(c, s.egressSocket()); err != nil {
		return nil, fmt.Errorf("routing the API server's cluster traffic: %w", err)
	}
	if err := cl.startSimulator(ctx, s); err != nil {
		return nil, err
	}
	for _, n := range cl.nodes {
		switch {
		case s.manifests:
			// The agent DaemonSet, applied below, runs on every node.
			cl.proxyName = "the svcnet-agent DaemonSet's Pod"
			continue
		case c.Pipeline == PipelineUpstream:
			err = cl.startKubeProxy(ctx, c, n, s.binDir, s.restCfg.Host, s.kubeconfig, s.logs)
		default:
			err = cl.startAgent(ctx, c, n, s.pk, s.restCfg.Host, s.kubeconfig, s.logs)
		}
		if err != nil {
			return nil, err
		}
	}
	if cl.router != "" {
		if err := cl.startRouter(s); err != nil {
			return nil, err
		}
	}
	if err := cl.install(ctx, s); err != nil {
		return nil, err
	}
	return cl, nil
}

// install installs what runs on the nodes as a cluster installer would:
// kube-proxy (--kube-proxy), svcnet from its manifests or chart, with
// its default pool, and cluster DNS.
func (cl *cluster) install(ctx context.Context, s *session) error {
	c, out := s.cfg, s.out
	if c.KubeProxy {
		if err := installKubeProxy(ctx, s); err != nil {
			return err
		}
		fmt.Fprintf(out, "kube-proxy installed as kubeadm installs it (%s mode), on every node labelled %s=%s; svcnet's agents will stand by\n",
			c.ProxyMode, agent.LabelNodeProxy, agent.NodeProxyKubeProxy)
	}
	if s.manifests {
		if err := cl.installManifests(ctx, s); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s installed: %s and %s running in namespace %s\n", installedWhat[c.Install], managerName, agentName, svcnetNamespace)
		if len(c.ranges.loadBalancer) > 0 {
			if err := ensureDefaultPool(ctx, s.admin, c); err != nil {
				return err
			}
		}
	}
	if c.DNS {
		return cl.installDNS(ctx, s.admin, cl.dnsIP)
	}
	return nil
}

// buildNetwork makes the fabric, the node namespaces routed to each other,
// and the client namespace routed to Pods, Services and LoadBalancer
// addresses through the nodes, with an address of each of the network's
// families.
func (cl *cluster) buildNetwork(c Config) (err error) {
	if cl.lab, err = netlab.New(cl.prefix); err != nil {
		return err
	}
	services := c.routedServiceCIDRs()
	// A Service address no node has rules for is refused at once by the
	// fabric, not left to time out: a request shows the state at once.
	for _, addr := range c.fabricAddrs(fabricHost) {
		if err := cl.lab.RefuseUnserved(addr, ofFamily(services, addr.Addr())...); err != nil {
			return err
		}
	}
	if err := cl.addNodes(c, services); err != nil {
		return err
	}
	if cl.client, err = cl.addOutside(c, "client", clientHost); err != nil {
		return err
	}
	if err := cl.routeOutside(cl.client, services); err != nil {
		return err
	}
	return cl.routeLoadBalancers(c)
}

// ofFamily are the prefixes of ps of a's family.
func ofFamily(ps []netip.Prefix, a netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == a.Is4() {
			out = append(out, p)
		}
	}
	return out
}

// addOutside makes a namespace on the fabric outside the nodes, at host
// in each of the network's families.
func (cl *cluster) addOutside(c Config, role string, host int) (string, error) {
	addrs := c.fabricAddrs(host)
	return cl.lab.AddClient(role, addrs[0], addrs[1:]...)
}

// routeOutside routes a namespace outside the nodes as a router that
// learned the cluster's routes would: Pods through their node, the
// anyNode prefixes (Service and LoadBalancer addresses) through any node
// (one route, every node's address of the prefix's family a next hop).
func (cl *cluster) routeOutside(ns string, anyNode []netip.Prefix) error {
	if err := cl.routePods(ns); err != nil {
		return err
	}
	for _, p := range anyNode {
		if err := cl.lab.RouteVia(ns, p, cl.nodeIPs(p.Addr())...); err != nil {
			return err
		}
	}
	return nil
}

// routePods routes every node's Pod CIDRs from ns through the node's
// address of the same family.
func (cl *cluster) routePods(ns string) error {
	for _, n := range cl.nodes {
		for i, cidr := range n.Net.PodCIDRs {
			if err := cl.lab.RouteVia(ns, cidr, n.Net.IPs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodeIPs are the nodes' addresses of a's family.
func (cl *cluster) nodeIPs(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, n := range cl.nodes {
		for _, ip := range n.Net.IPs {
			if ip.Is4() == a.Is4() {
				out = append(out, ip)
			}
		}
	}
	return out
}

// addNodes makes the node namespaces, each with an address and a Pod
// CIDR of each family, and routes every node's Pods from every other
// node.
func (cl *cluster) addNodes(c Config, services []netip.Prefix) error {
	for i := 1; i <= c.Nodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		n, err := cl.addNode(c, name, i, services)
		if err != nil {
			return fmt.Errorf("creating node %s: %w", name, err)
		}
		cl.nodes = append(cl.nodes, nodesim.Node{Name: name, Zone: zoneOf(i, c.Zones), Net: n})
	}
	for _, a := range cl.nodes {
		for _, b := range cl.nodes {
			if a.Name != b.Name {
				if err := a.Net.Route(b.Net); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// addNode makes node i's namespace with its addresses and Pod CIDRs, the
// network's first family first.
func (cl *cluster) addNode(c Config, name string, i int, services []netip.Prefix) (*netlab.Node, error) {
	addrs := c.fabricAddrs(nodeHost + i)
	var podCIDRs []netip.Prefix
	for _, cluster := range c.ranges.cluster {
		p, err := nodesim.PodCIDR(cluster, i)
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr: %w", err)
		}
		podCIDRs = append(podCIDRs, p)
	}
	n, err := cl.lab.AddNode(name, addrs[0], podCIDRs[0], services...)
	if err != nil {
		return nil, err
	}
	for j := 1; j < len(addrs); j++ {
		if err := n.AddFamily(addrs[j], podCIDRs[j], services...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// startSimulator runs the node simulator, the nodes' kubelets and the
// scheduler, in a controller-runtime manager of its own without leader
// election, and waits until it registered every Node.
func (cl *cluster) startSimulator(ctx context.Context, s *session) error {
	c := s.cfg
	// Each kubelet has its own client (50 QPS by default); the simulator
	// stands for all of them.
	simCfg := rest.CopyConfig(s.restCfg)
	simCfg.QPS, simCfg.Burst = float32(50*c.Nodes), 100*c.Nodes
	mgr, err := ctrlmanager.New(simCfg, ctrlmanager.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 logr.FromContextOrDiscard(ctx).WithName("node-simulator"),
	})
	if err != nil {
		return err
	}
	podsDir := filepath.Join(s.dataDir, "pods")
	if err := os.RemoveAll(podsDir); err != nil {
		return fmt.Errorf("removing the Pod files of an earlier run: %w", err)
	}
	store, err := s.imageStore()
	if err != nil {
		return err
	}
	caCert, err := os.ReadFile(s.pk.CACert)
	if err != nil {
		return err
	}
	caKey, err := os.ReadFile(s.pk.CAKey)
	if err != nil {
		return err
	}
	opts := nodesim.Options{
		Nodes:   cl.nodes,
		Images:  store,
		PodsDir: podsDir,
		LogDir:  filepath.Join(s.logs, "pods"),
		DNS:     nodesim.DNS{Domain: addons.ClusterDomain},
		Kubelet: &nodesim.KubeletOptions{CACert: caCert, CAKey: caKey},
	}
	if c.DNS {
		opts.DNS.Servers = []netip.Addr{cl.dnsIP}
	}
	if err := nodesim.Add(mgr, opts); err != nil {
		return err
	}
	simCtx, stopSim := context.WithCancel(ctx)
	cl.stopSim, cl.simDone = stopSim, make(chan struct{})
	go func() {
		cl.simErr = mgr.Start(simCtx)
		close(cl.simDone)
	}()
	return cl.waitNodes(ctx, mgr.GetAPIReader())
}

// A node's proxy, svcnet's agent or kube-proxy, serves its health and
// metrics at kube-proxy's addresses inside its node, where upstream's e2e
// reads them from hostNetwork Pods (/healthz, /proxyMode).
const (
	nodeProxyHealthz = "127.0.0.1:10256"
	nodeProxyMetrics = "127.0.0.1:10249"
)

// startAgent runs `svcnet agent` inside node n's namespace (its API on
// the node's address, nodeview.DefaultPort), as the
// DaemonSet's hostNetwork Pod runs on a real node; its BGP speaker then
// dials the router from the node, which graceful restart needs (the
// router waits for a restarting speaker to connect).
func (cl *cluster) startAgent(ctx context.Context, c Config, n nodesim.Node, pk *controlplane.PKI, apiURL, kubeconfig, logs string) error {
	cl.proxyName = "a svcnet agent"
	// The agent's API serves a certificate of the cluster's CA, which
	// svcnet explain verifies.
	cert, key, err := pk.NodeServing("agent", n.Name, append([]string{n.Name}, addrStrings(n.Net.IPs)...))
	if err != nil {
		return fmt.Errorf("the agent API's certificate of %s: %w", n.Name, err)
	}
	args := []string{cl.agentBin, "agent", "--kubeconfig=" + kubeconfig, "--node-name=" + n.Name,
		"--api-tls-cert-file=" + cert, "--api-tls-private-key-file=" + key,
		"--cluster-cidr=" + c.ClusterCIDR, "--mode=" + string(c.ProxyMode),
		"--conntrack-max-per-core=0", // nf_conntrack_max is the host's, read-only in a node's namespace
		"--healthz-bind-address=" + nodeProxyHealthz, "--metrics-bind-address=" + nodeProxyMetrics,
		"-v=" + strconv.Itoa(max(c.Verbosity, 2))}
	args = append(args, c.proxySyncArgs()...)
	return cl.startNodeProxy(ctx, n, apiURL, "svcnet agent", args, "agent-"+n.Name+".log", "/readyz", logs)
}

// proxySyncArgs are the flags a node proxy, the agent or kube-proxy,
// takes for --min-sync-period.
func (c Config) proxySyncArgs() []string {
	if !c.MinSyncPeriod.IsSet {
		return nil
	}
	return []string{"--iptables-min-sync-period=" + c.MinSyncPeriod.Value.String()}
}

// startKubeProxy runs kube-proxy inside node n's namespace, as on a real
// node (UPSTREAM-NOTES: conntrack-max-per-core=0 in a namespace).
func (cl *cluster) startKubeProxy(ctx context.Context, c Config, n nodesim.Node, binDir, apiURL, kubeconfig, logs string) error {
	cl.proxyName = "kube-proxy"
	args := []string{filepath.Join(binDir, upstreamNodeBinary),
		"--kubeconfig=" + kubeconfig, "--proxy-mode=" + string(c.ProxyMode), "--hostname-override=" + n.Name,
		"--cluster-cidr=" + c.ClusterCIDR, "--conntrack-max-per-core=0",
		"--healthz-bind-address=" + nodeProxyHealthz, "--metrics-bind-address=" + nodeProxyMetrics,
		"--v=" + strconv.Itoa(max(c.Verbosity, 2))}
	args = append(args, c.proxySyncArgs()...)
	return cl.startNodeProxy(ctx, n, apiURL, "kube-proxy", args, "kube-proxy-"+n.Name+".log", "/healthz", logs)
}

// installKubeProxy installs kube-proxy as kubeadm does, in this run's
// mode and Pod range, for --kube-proxy.
func installKubeProxy(ctx context.Context, s *session) error {
	config, err := kubeadm.KubeProxyConfig(map[string]any{
		"mode": string(s.cfg.ProxyMode), "clusterCIDR": s.cfg.ClusterCIDR,
		// As kind's: nf_conntrack_max is the host's, read-only in a node's
		// namespace.
		"conntrack.maxPerCore": 0,
	})
	if err != nil {
		return err
	}
	if err := addons.InstallKubeProxy(ctx, s.admin, config); err != nil {
		return fmt.Errorf("installing kube-proxy (--kube-proxy): %w", err)
	}
	return addons.WaitKubeProxy(ctx, s.admin, 2*time.Minute)
}

// startNodeProxy runs a node's proxy (args: its binary and flags) inside
// node n's namespace under supervision, reaching the API server through a
// forwarder at the same loopback address, and waits for readyPath on its
// health address.
func (cl *cluster) startNodeProxy(ctx context.Context, n nodesim.Node, apiURL, name string, args []string, logName, readyPath, logs string) error {
	u, err := url.Parse(apiURL)
	if err != nil {
		return err
	}
	if err := cl.lab.Forward(n.Net.NetNS, u.Host, u.Host); err != nil {
		return fmt.Errorf("forwarding the API server into %s: %w", n.Net.NetNS, err)
	}
	p, err := cl.superviseNodeProxy(n.Name, name+" on "+n.Name, "ip", append([]string{"netns", "exec", n.Net.NetNS}, args...), filepath.Join(logs, logName))
	if err != nil {
		return err
	}
	tr := &http.Transport{DialContext: netns.DialContext(netlab.Path(n.Net.NetNS))}
	return controlplane.WaitReadyVia(ctx, p, "http://"+nodeProxyHealthz+readyPath, tr, "", 60*time.Second)
}

// waitNodes waits until the simulator registered every Node.
func (cl *cluster) waitNodes(ctx context.Context, r client.Reader) error {
	for _, n := range cl.nodes {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			select {
			case <-cl.simDone:
				return false, fmt.Errorf("node simulator stopped: %w", cl.simErr)
			default:
			}
			var obj metav1.PartialObjectMetadata
			obj.SetGroupVersionKind(nodeGVK)
			last = r.Get(ctx, client.ObjectKey{Name: n.Name}, &obj)
			if last != nil && !apierrors.IsNotFound(last) {
				return false, last
			}
			return last == nil, nil
		})
		if err != nil {
			if last == nil || ctx.Err() != nil {
				return fmt.Errorf("node %s not registered: %w", n.Name, err)
			}
			return fmt.Errorf("node %s not registered: %w", n.Name, last)
		}
	}
	return nil
}

// stop ends the agents and the simulator, then removes every namespace.
func (cl *cluster) stop() {
	for _, p := range cl.agents {
		p.stop(10 * time.Second)
	}
	if cl.frr != nil {
		cl.frr.Stop()
	}
	if cl.stopSim != nil {
		cl.stopSim()
		<-cl.simDone
	}
	if cl.lab != nil {
		cl.lab.Close()
	}
	cl.unlock()
}

// superviseNodeProxy starts node's svcnet agent (or kube-proxy) and keeps
// it running as a kubelet keeps a DaemonSet's Pod: restarted with back-off
// when it exits, each restart announced on out and recorded as an Event on
// the Node, the rest of the cluster untouched. It returns the first
// process.
func (cl *cluster) superviseNodeProxy(node, name, bin string, args []string, logPath string) (*process, error) {
	sv, p, err := startSupervised(name, bin, args, logPath, nodeProxyRestarts)
	if err != nil {
		return nil, err
	}
	sv.onRestart = func(ev restartEvent) { cl.recordRestart(node, ev) }
	cl.agents = append(cl.agents, sv)
	go sv.run(cl.out, cl.failed)
	return p, nil
}

// ProxyRestartedReason is the reason of the Warning Event a node's agent
// (or kube-proxy) leaves on its Node each time it is restarted.
const ProxyRestartedReason = "ServiceProxyRestarted"

// recordRestart records ev as a Warning Event on node's Node. The
// reference carries the Node's name as its UID, as a kubelet's does, so
// that kubectl describe node lists it.
func (cl *cluster) recordRestart(node string, ev restartEvent) {
	if cl.events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now := metav1.Now()
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)},
		Reason:         ProxyRestartedReason,
		Message:        ev.String(),
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "svcnet-up", Host: node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if err := cl.events.Create(ctx, e); err != nil {
		fmt.Fprintf(cl.out, "recording the restart of %s on Node %s: %v\n", ev.name, node, err)
	}
}

// defaultPoolName is the LoadBalancerIPPool `svcnet up` creates from
// --load-balancer-ip-range.
const defaultPoolName = "svcnet-up"

// ensureDefaultPool creates the pool of --load-balancer-ip-range once
// (later edits by the user stay), and its announcement as --lb-announce
// says.
func ensureDefaultPool(ctx context.Context, c client.Client, cfg Config) error {
	var cidrs []string
	for _, p := range cfg.ranges.loadBalancer {
		cidrs = append(cidrs, p.String())
	}
	pool := &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: defaultPoolName},
		Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: cidrs, AvoidBuggyIPs: true},
	}
	if err := c.Create(ctx, pool); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating LoadBalancerIPPool %s: %w", defaultPoolName, err)
	}
	// The router's address of each family peers with the nodes' of the
	// same family.
	return ensureAnnouncement(ctx, c, cfg.LBAnnounce, addrs(cfg.fabricAddrs(routerHost)))
}

var nodeGVK = corev1.SchemeGroupVersion.WithKind("Node")

// freeLoopbackPort asks the kernel for a free port on 127.0.0.1.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
