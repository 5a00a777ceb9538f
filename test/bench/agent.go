// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// The node agent benchmark: svcnet agent and kube-proxy each program their
// own node (a network namespace) from the same Services and EndpointSlices,
// and every latency is measured with real connections: from the moment the
// EndpointSlice write is sent until a connection from the node to the
// ClusterIP reaches the new endpoint. One backend namespace owns every
// endpoint address (a local route for the whole range) and answers with the
// address a connection reached.
const (
	agentClusterCIDR = "10.224.0.0/11"
	agentServiceCIDR = "10.96.0.0/16"
	agentTimeout     = 20 * time.Minute
	agentPort        = 8080
)

// Endpoint addresses come from 10.240.0.0/12, inside the cluster CIDR.
var agentEndpointRange = netip.MustParsePrefix("10.240.0.0/12")

type agentImpl struct {
	name string
	// mode is the dataplane mode.
	mode string
	argv func(root, kubeconfig, node string) []string
	// compare names the proxy this one runs at the same settings as, and
	// whose figures its ratios divide by; "" for none.
	compare string
}

// kubeProxyModes are the modes kube-proxy is measured in
// (-kube-proxy-modes); svcnet runs in every mode.
var kubeProxyModes = flag.String("kube-proxy-modes", "iptables,nftables", "modes kube-proxy is measured in by the node agent benchmarks")

// agentImpls are the proxies of the node agent benchmarks, for each mode:
// svcnet's agent at its defaults (no minimum sync period, GOGC=50), the
// agent at Go's default collector setting, and kube-proxy with no
// minimum sync period (the agent's default) at Go's default collector
// setting (its own): those two run at the same settings and are
// compared.
func agentImpls() []agentImpl {
	kubeProxy := func(mode string) func(root, kc, node string) []string {
		return func(root, kc, node string) []string {
			return kubeProxyArgv(root, kc, node, mode, "--iptables-min-sync-period=0")
		}
	}
	svcnet := func(mode string, env ...string) func(root, kc, node string) []string {
		return func(root, kc, node string) []string {
			argv := []string{filepath.Join(root, "bin/svcnet-agent"), "agent", "--kubeconfig=" + kc, "--node-name=" + node,
				"--mode=" + mode, "--cluster-cidr=" + agentClusterCIDR, "--conntrack-max-per-core=0", "--v=2",
				"--pprof-bind-address=" + os.Getenv("SVCNET_BENCH_PPROF")}
			if len(env) > 0 {
				argv = append(append([]string{"env"}, env...), argv...)
			}
			return argv
		}
	}
	var impls []agentImpl
	for _, mode := range []string{"iptables", "nftables"} {
		agent := "svcnet agent --mode=" + mode
		kp := "kube-proxy --proxy-mode=" + mode + " --iptables-min-sync-period=0"
		impls = append(impls, agentImpl{name: agent, mode: mode, argv: svcnet(mode)})
		if !slices.Contains(strings.Split(*kubeProxyModes, ","), mode) {
			continue
		}
		impls = append(impls,
			// The agent's collector setting (GOGC=50, see agent.GCPercent)
			// at Go's default, kube-proxy's.
			agentImpl{name: agent + ", GOGC=100", mode: mode, argv: svcnet(mode, "GOGC=100"), compare: kp},
			agentImpl{name: kp, mode: mode, argv: kubeProxy(mode)})
	}
	if *agentsOnly == "" {
		return impls
	}
	only := regexp.MustCompile(*agentsOnly)
	return slices.DeleteFunc(impls, func(i agentImpl) bool { return !only.MatchString(i.name) })
}

// kubeProxyArgv runs upstream's kube-proxy (bin/k8s) for node in mode,
// on its default health and metrics addresses.
func kubeProxyArgv(root, kubeconfig, node, mode string, extra ...string) []string {
	return append([]string{filepath.Join(root, "bin/k8s/kube-proxy"), "--kubeconfig=" + kubeconfig, "--proxy-mode=" + mode,
		"--hostname-override=" + node, "--cluster-cidr=" + agentClusterCIDR, "--conntrack-max-per-core=0", "--v=2"}, extra...)
}

// agentsOnly narrows the node agent benchmark to some proxies (-agents), for
// profiling one of them (with SVCNET_BENCH_PPROF and SVCNET_BENCH_KEEP).
var agentsOnly = flag.String("agents", "", "regular expression: the node agent benchmark runs only the proxies whose name (as in the table, e.g. 'svcnet agent --mode=nftables') it matches; empty: all")

type agentScenario struct {
	letter byte
	// mode is the dataplane mode whose proxies run; "" for every mode.
	mode     string
	services int // background Services, 10 endpoints each
	changes  int // endpoint changes of the probe Service
	// gap is the pause after one change converged before the next; a
	// random pause up to gap when random is set.
	gap    time.Duration
	random bool
}

// agentResult is one run of one proxy: its cold sync, each change's
// time, its CPU seconds and its peak RSS.
type agentResult struct {
	ColdSync  time.Duration   `json:"coldSync"`
	Latencies []time.Duration `json:"changes"`
	CPU       float64         `json:"cpu"`
	RSSMiB    float64         `json:"rssMiB"`
}

// agentWorld is one API server with its Services and EndpointSlices, and
// the fabric the nodes plug into.
type agentWorld struct {
	env  *testenv.Env
	lab  *netlab.Lab
	ns   string
	next int // endpoint address counter
	// nextClusterIP counts the ClusterIPs asked for.
	nextClusterIP int
	nodes         int
	probe         *corev1.Service
	// sample are ClusterIPs of background Services spread over all of
	// them: a cold sync is over once they answer too.
	sample []string
	// datapath holds the Services the datapath benchmark connects to, when
	// the world was made for it: a TCP and a UDP one, 10 endpoints each.
	datapath *datapathServices
}

// clusterIP is the next ClusterIP the benchmark asks for, from
// 10.96.1.0 on: kube-apiserver honours a requested address at once,
// while its own choice slows down as the range fills (a create took
// tens of milliseconds of its CPU at 50,000 Services), which is not what
// these benchmarks time.
func (w *agentWorld) clusterIP() string {
	w.nextClusterIP++
	a := netip.MustParseAddr("10.96.1.0").As4()
	binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])+uint32(w.nextClusterIP-1))
	return netip.AddrFrom4(a).String()
}

func (w *agentWorld) endpointIP() string {
	w.next++
	a := agentEndpointRange.Addr().As4()
	binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])+uint32(w.next))
	return netip.AddrFrom4(a).String()
}

func agentSlice(svc *corev1.Service, ips []string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "bench.svcnet.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](agentPort), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return s
}

// addService creates a Service without selector and its one slice.
func (w *agentWorld) addService(ctx context.Context, name string, ips []string) (*corev1.Service, error) {
	return w.addServicePort(ctx, name, corev1.ProtocolTCP, 80, ips)
}

// addServicePort creates a Service of one port without selector and its
// one slice.
func (w *agentWorld) addServicePort(ctx context.Context, name string, proto corev1.Protocol, port int32, ips []string) (*corev1.Service, error) {
	return w.addServiceAt(ctx, name, w.clusterIP(), proto, port, ips)
}

// addServiceAt is addServicePort with the ClusterIP given.
func (w *agentWorld) addServiceAt(ctx context.Context, name, ip string, proto corev1.Protocol, port int32, ips []string) (*corev1.Service, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: corev1.ServiceSpec{ClusterIP: ip,
			Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: proto, TargetPort: intstr.FromInt32(agentPort)}}},
	}
	if err := w.env.Client.Create(ctx, svc); err != nil {
		return nil, err
	}
	slice := agentSlice(svc, ips)
	slice.Ports[0].Protocol = ptr.To(proto)
	return svc, w.env.Client.Create(ctx, slice)
}

func newAgentWorld(ctx context.Context, services int) (*agentWorld, error) {
	return newAgentWorldFor(ctx, services, false)
}

// newAgentWorldFor makes the world of the node agent benchmarks; with
// datapath, the Services the datapath benchmark connects to as well.
func newAgentWorldFor(ctx context.Context, services int, datapath bool) (*agentWorld, error) {
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: agentServiceCIDR})
	if err != nil {
		return nil, err
	}
	w := &agentWorld{env: env}
	if w.lab, err = netlab.New(fmt.Sprintf("svcnet-bench%04d", rand.IntN(10000))); err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := w.lab.RefuseUnserved(netip.MustParsePrefix("192.168.60.1/24"), netip.MustParsePrefix(agentServiceCIDR)); err != nil {
		w.close()
		return nil, err
	}
	if w.ns, err = env.Namespace(ctx, "bench"); err != nil {
		w.close()
		return nil, err
	}
	if err := w.loadBackground(ctx, services); err != nil {
		w.close()
		return nil, err
	}
	if datapath {
		if w.datapath, err = w.addDatapathServices(ctx); err != nil {
			w.close()
			return nil, err
		}
	}
	// The probe Service is created last, so a proxy that serves it has
	// synced everything before it.
	if w.probe, err = w.addService(ctx, "probe", []string{w.endpointIP()}); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// loadBackground stores services Services svc0, svc1, ... of 10 endpoints
// each straight into etcd (etcdload.go) and checks that the API server
// serves every one of them and its slice.
func (w *agentWorld) loadBackground(ctx context.Context, services int) error {
	background := make([]storedService, services)
	step := max(1, services/coldSyncSample)
	for i := range background {
		background[i] = storedService{name: fmt.Sprintf("svc%d", i), clusterIP: w.clusterIP()}
		for range 10 {
			background[i].endpoints = append(background[i].endpoints, w.endpointIP())
		}
		if i%step == 0 || i == services-1 {
			w.sample = append(w.sample, background[i].clusterIP)
		}
	}
	if err := loadIntoEtcd(ctx, w.env.EtcdURL(), w.ns, background); err != nil {
		return err
	}
	// The API server's watch cache takes the writes in from etcd's watch
	// a moment later.
	deadline := time.Now().Add(time.Minute)
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("ServiceList"),
		discoveryv1.SchemeGroupVersion.WithKind("EndpointSliceList"),
	} {
		for {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(gvk)
			if err := w.env.Client.List(ctx, list, client.InNamespace(w.ns)); err != nil {
				return fmt.Errorf("listing the background objects: %w", err)
			}
			if len(list.Items) == services {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the API server serves %d of the %d %s written to etcd", len(list.Items), services, gvk.Kind)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func (w *agentWorld) close() {
	w.lab.Close()
	_ = w.env.Stop()
}

// node is one proxy's node: a namespace with a backend Pod owning every
// endpoint address and a forwarder to the API server on the same loopback
// address and port as outside, so the kubeconfig is the same.
type benchNode struct {
	node    *netlab.Node
	client  *http.Client
	probeIP string
	last    string
}

func (w *agentWorld) addNode(ctx context.Context) (*benchNode, error) {
	w.nodes++
	i := w.nodes
	n, err := w.lab.AddNode(fmt.Sprintf("node%d", i), netip.MustParsePrefix(fmt.Sprintf("192.168.60.%d/24", 10+i)),
		netip.MustParsePrefix(fmt.Sprintf("10.239.%d.0/24", i)), netip.MustParsePrefix(agentServiceCIDR))
	if err != nil {
		return nil, err
	}
	pod, err := n.AddPod(fmt.Sprintf("backend%d", i), agentPort)
	if err != nil {
		return nil, err
	}
	if err := pod.AddRange(agentEndpointRange); err != nil {
		return nil, err
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
	if err := w.env.Client.Create(ctx, node); err != nil {
		return nil, err
	}
	// Status is not written by a create. kube-proxy needs the InternalIP.
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}}
	if err := w.env.Client.Status().Update(ctx, node); err != nil {
		return nil, err
	}
	u, err := url.Parse(w.env.Config.Host)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if err := w.lab.Forward(n.NetNS, host, host); err != nil {
		return nil, err
	}
	return &benchNode{node: n, client: netlab.Client(n.NetNS, time.Second),
		probeIP: w.probe.Spec.ClusterIP}, nil
}

// coldSyncSample is about how many background Services, spread over all of
// them, must answer before a cold sync counts as done: a proxy that writes
// its table in several transactions (svcnet's agent loads its data sets
// in chunks) serves the probe before it has written everything.
const coldSyncSample = 100

// reached is the endpoint address a new connection to the probe Service
// reaches from the node, or "" when none answers.
func (n *benchNode) reached(ctx context.Context) string {
	return n.reachedAt(ctx, n.probeIP)
}

// reachedAt is reached for the Service of clusterIP.
func (n *benchNode) reachedAt(ctx context.Context, clusterIP string) string {
	body, err := netlab.Get(ctx, n.client, "http://"+clusterIP+"/")
	if err != nil {
		return ""
	}
	if f := strings.Fields(body); len(f) == 3 {
		return f[2]
	}
	return ""
}

// waitFor probes every millisecond until the probe Service leads to want
// ("" = to any endpoint) and returns the time it took since start.
func (n *benchNode) waitFor(ctx context.Context, want string, start time.Time) (time.Duration, error) {
	deadline := start.Add(agentTimeout)
	for {
		got := n.reached(ctx)
		if got != "" && (want == "" || got == want) {
			n.last = got
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the probe Service still leads to %q after %s, want %q", got, agentTimeout, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitForAll probes the Services of clusterIPs every millisecond until
// each has answered once, and returns the time since start.
func (n *benchNode) waitForAll(ctx context.Context, clusterIPs []string, start time.Time) (time.Duration, error) {
	deadline := start.Add(agentTimeout)
	left := slices.Clone(clusterIPs)
	for {
		left = slices.DeleteFunc(left, func(ip string) bool { return n.reachedAt(ctx, ip) != "" })
		if len(left) == 0 {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d of %d Services still do not answer after %s, among them %s", len(left), len(clusterIPs), agentTimeout, left[0])
		}
		time.Sleep(time.Millisecond)
	}
}

// slowChange is the time above which a change is logged with when it was
// sent, to be found in the proxy's log.
const slowChange = 20 * time.Millisecond

// change points the probe Service at a fresh endpoint and
// measures until a connection from the node reaches it; write is the
// part the API server took to answer the update.
func (w *agentWorld) change(ctx context.Context, n *benchNode) (total, write time.Duration, err error) {
	ip := w.endpointIP()
	var s discoveryv1.EndpointSlice
	if err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "probe"}, &s); err != nil {
		return 0, 0, err
	}
	s.Endpoints = agentSlice(w.probe, []string{ip}).Endpoints
	start := time.Now()
	if err := w.env.Client.Update(ctx, &s); err != nil {
		return 0, 0, err
	}
	write = time.Since(start)
	total, err = n.waitFor(ctx, ip, start)
	return total, write, err
}

// runAgent runs one proxy on a new node of the world through the
// scenario; atEnd, when set, is called with the node before the proxy
// stops.
func runAgent(ctx context.Context, root, workDir string, w *agentWorld, impl agentImpl, sc agentScenario, atEnd func(*benchNode) error) (agentResult, error) {
	var res agentResult
	n, err := w.addNode(ctx)
	if err != nil {
		return res, err
	}
	kc := filepath.Join(workDir, "kubeconfig")
	if err := w.env.WriteKubeconfig(kc); err != nil {
		return res, err
	}
	argv := append([]string{"ip", "netns", "exec", n.node.NetNS}, impl.argv(root, kc, n.node.Name)...)
	logPath := filepath.Join(workDir, strings.Fields(impl.name)[0]+"-"+impl.mode+".log")
	p, err := startProc(logPath, argv...)
	if err != nil {
		return res, err
	}
	defer p.stop()
	if res.ColdSync, err = n.waitForAll(ctx, append([]string{n.probeIP}, w.sample...), p.started); err != nil {
		return res, fmt.Errorf("%s cold sync: %w (log: %s)", impl.name, err, logPath)
	}
	// Serving the Services is not the end of a cold sync where the proxy
	// writes the rest of its table after them: it is over when the
	// proxy stops working, and changes are measured from then on.
	done, err := p.settled(p.started.Add(agentTimeout))
	if err != nil {
		return res, fmt.Errorf("%s cold sync: %w (log: %s)", impl.name, err, logPath)
	}
	res.ColdSync = max(res.ColdSync, done.Sub(p.started))
	time.Sleep(sc.gap + time.Second) // out of any minimum sync interval
	rng := rand.New(rand.NewPCG(uint64(sc.letter), 1))
	for range sc.changes {
		at := time.Now()
		d, write, err := w.change(ctx, n)
		if err != nil {
			return res, fmt.Errorf("%s: %w (log: %s)", impl.name, err, logPath)
		}
		if d > slowChange {
			progress("(%c) %s: a change sent at %s took %s, the API server's answer to the write %s\n", sc.letter, impl.name,
				at.Format("15:04:05.000"), d.Round(100*time.Microsecond), write.Round(100*time.Microsecond))
		}
		res.Latencies = append(res.Latencies, d)
		pause := sc.gap
		if sc.random {
			pause = time.Duration(rng.Int64N(int64(sc.gap) + 1))
		}
		time.Sleep(pause)
	}
	res.CPU = p.cpuSeconds()
	res.RSSMiB = p.peakRSSMiB()
	if atEnd != nil {
		if err := atEnd(n); err != nil {
			return res, fmt.Errorf("%s: %w", impl.name, err)
		}
	}
	return res, nil
}

// agentData is (g), (h) and (i)'s record.
type agentData struct {
	Repeats   int                 `json:"repeats"`
	Scenarios []agentScenarioRuns `json:"scenarios"`
}

// agentScenarioRuns are one scenario's runs, by proxy.
type agentScenarioRuns struct {
	Name     string           `json:"name"`
	Mode     string           `json:"mode,omitempty"`
	Services int              `json:"services"`
	Changes  int              `json:"changes"`
	Gap      time.Duration    `json:"gap"`
	Random   bool             `json:"random,omitempty"`
	Proxies  []agentProxyRuns `json:"proxies"`
}

// agentProxyRuns are one proxy's runs of a scenario.
type agentProxyRuns struct {
	Proxy   string        `json:"proxy"`
	Mode    string        `json:"mode"`
	Compare string        `json:"compare,omitempty"`
	Runs    []agentResult `json:"runs"`
}

const agentTitle = "## Node agent: svcnet agent vs kube-proxy, iptables and nftables modes (g)-(i)"

// agentScenarios are (g) in both modes at 1,000 Services, and (h) with
// (i) at 10,000 Services in nftables mode and at 2,000 in iptables mode,
// whose cold syncs through iptables-restore on the nf_tables backend
// grow faster than the ruleset (minutes at 10,000 Services, for every
// proxy).
func agentScenarios(scale int) []agentScenario {
	return []agentScenario{
		{letter: 'g', services: 1000 / scale, changes: 200 / scale, gap: 500 * time.Millisecond, random: true},
		{letter: 'h', mode: "nftables", services: 10000 / scale, changes: max(1, 20/scale), gap: 1200 * time.Millisecond},
		{letter: 'h', mode: "iptables", services: 2000 / scale, changes: max(1, 20/scale), gap: 1200 * time.Millisecond},
	}
}

func (sc agentScenario) title() string {
	if sc.letter == 'g' {
		return fmt.Sprintf("(g) %d endpoint changes at %d Services", sc.changes, sc.services)
	}
	return fmt.Sprintf("(h) cold sync, (i) %d single endpoint changes at %d Services x 10 endpoints, %s mode", sc.changes, sc.services, sc.mode)
}

func agentReport(ctx context.Context, root string, scale int, only, skip string, keep bool) (string, error) {
	var pending []agentScenario
	for _, sc := range agentScenarios(scale) {
		if selected(only, string(sc.letter)) || (sc.letter == 'h' && selected(only, "i")) {
			pending = append(pending, sc)
		}
	}
	if len(pending) == 0 {
		return "", nil
	}
	if skip != "" {
		return fmt.Sprintf("%s\n\nNot run: %s.\n", agentTitle, skip), nil
	}
	rec := newRecord[agentData](root, "ghi")
	rec.Tools["kube-proxy"] = toolVersion(filepath.Join(root, "bin/k8s/kube-proxy"))
	rec.Tools["iptables"], rec.Tools["nft"] = iptablesVersion(), nftVersion()
	data := agentData{Repeats: *repeats}
	sampler := newLoadSampler()
	for _, sc := range pending {
		runs, err := runAgentScenario(ctx, root, sc)
		if err != nil {
			return "", err
		}
		data.Scenarios = append(data.Scenarios, runs)
	}
	return rec.close(root, sampler, data, keep, renderAgent)
}

// runAgentScenario runs every proxy of the scenario's mode (of every mode
// when it has none) *repeats times on one API server, the proxies
// taking turns, each on a node of its own.
func runAgentScenario(ctx context.Context, root string, sc agentScenario) (agentScenarioRuns, error) {
	out := agentScenarioRuns{Name: sc.title(), Mode: sc.mode, Services: sc.services, Changes: sc.changes, Gap: sc.gap, Random: sc.random}
	impls := slices.DeleteFunc(agentImpls(), func(i agentImpl) bool { return sc.mode != "" && i.mode != sc.mode })
	for _, impl := range impls {
		out.Proxies = append(out.Proxies, agentProxyRuns{Proxy: impl.name, Mode: impl.mode, Compare: impl.compare})
	}
	progress("%s: creating the objects\n", out.Name)
	w, err := newAgentWorld(ctx, sc.services)
	if err != nil {
		return out, err
	}
	defer w.close()
	for repeat := range *repeats {
		for i, impl := range impls {
			progress("%s with %s (run %d/%d)\n", out.Name, impl.name, repeat+1, *repeats)
			dir, err := os.MkdirTemp("", "svcnet-bench-")
			if err != nil {
				return out, err
			}
			r, err := runAgent(ctx, root, dir, w, impl, sc, nil)
			if err != nil {
				return out, fmt.Errorf("%s, %s: %w", out.Name, impl.name, err)
			}
			if os.Getenv("SVCNET_BENCH_KEEP") == "" {
				os.RemoveAll(dir)
			} else {
				progress("logs kept in %s\n", dir)
			}
			out.Proxies[i].Runs = append(out.Proxies[i].Runs, r)
		}
	}
	return out, nil
}

// renderAgent writes (g)-(i) from their record alone.
func renderAgent(rec *record[agentData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(agentTitle))
	fmt.Fprintf(&b, "Each proxy runs alone as its own process in its own simulated node (a network namespace, reaching the same "+
		"kube-apiserver through a forwarder) and programs real iptables or nftables there (%s; %s). Services have no selector; the benchmark "+
		"writes their EndpointSlices itself (10 endpoints each), so the proxies see exactly the same objects. Every time is measured with "+
		"real connections from the node to a probe Service's ClusterIP, one new connection per millisecond: a change replaces the probe "+
		"Service's endpoint and counts from the moment the EndpointSlice update is sent until a connection reaches the new endpoint. "+
		"The cold sync is from process start until %s. kube-proxy (%s) runs with --iptables-min-sync-period=0, the agent's default, and at "+
		"Go's default collector setting (GOGC=100), its own: the agent's row at GOGC=100 runs at the same settings, and the ratios are its; "+
		"the agent's own default is GOGC=50, in the row without a GOGC. CPU is the process's user+system time for the whole run including "+
		"the iptables-restore or nft children it waited for; RSS its peak. Each proxy runs each scenario %d times on one API server, the "+
		"proxies taking turns; a cell gives the median of the runs with the smallest and largest, the slowest change is of all the runs' "+
		"changes. %s\n\n", rec.Tools["iptables"], rec.Tools["nft"], coldSyncEnd, rec.Tools["kube-proxy"], d.Repeats, rec.loadNote())
	b.WriteString("| scenario | proxy | cold sync (s) | change p50 (ms) | slowest change (ms) | CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|\n")
	for _, sc := range d.Scenarios {
		for _, p := range sc.Proxies {
			row := scaleRow{Runs: p.Runs}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", sc.Name, p.Proxy, spreadOf(row.values(coldSyncSeconds), "%.3f"),
				spreadOf(row.values(changeMs(0.5)), "%.1f"), slowestOf(p.Runs), spreadOf(row.values(func(a agentResult) float64 { return a.CPU }), "%.2f"),
				spreadOf(row.values(peakRSS), "%.0f"))
		}
		for _, p := range sc.Proxies {
			if u, ok := agentProxy(sc, p.Compare); ok {
				s, k := scaleRow{Runs: p.Runs}, scaleRow{Runs: u.Runs}
				m := func(r scaleRow, f func(agentResult) float64) float64 { return median(r.values(f)) }
				cpu := func(a agentResult) float64 { return a.CPU }
				fmt.Fprintf(&b, "| %s | **%s / %s** | **%.2fx** | **%.2fx** | | **%.2fx** | **%.2fx** |\n", sc.Name, p.Proxy, u.Proxy,
					ratio(m(s, coldSyncSeconds), m(k, coldSyncSeconds)), ratio(m(s, changeMs(0.5)), m(k, changeMs(0.5))),
					ratio(m(s, cpu), m(k, cpu)), ratio(m(s, peakRSS), m(k, peakRSS)))
			}
		}
	}
	b.WriteString("\nTargets, judged on the medians above (met only if the median meets it):\n\n")
	for _, line := range agentTargets(d) {
		b.WriteString("- " + line + "\n")
	}
	return b.String()
}

// agentProxy is the scenario's runs of the proxy named name.
func agentProxy(sc agentScenarioRuns, name string) (agentProxyRuns, bool) {
	i := slices.IndexFunc(sc.Proxies, func(p agentProxyRuns) bool { return p.Proxy == name && len(p.Runs) > 0 })
	if i < 0 || name == "" {
		return agentProxyRuns{}, false
	}
	return sc.Proxies[i], true
}

// slowestOf is the slowest change of all runs, with their count.
func slowestOf(runs []agentResult) string {
	var all []time.Duration
	for _, r := range runs {
		all = append(all, r.Latencies...)
	}
	if len(all) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f (of %d)", millis(slices.Max(all)), len(all))
}

// agentModeTargets are the node agent's targets in one mode: a change at
// 1,000 Services (g) and at 10,000 (i), and a cold sync as a share of
// kube-proxy's at the same settings (h).
type agentModeTargets struct {
	g, i time.Duration
	h    float64
}

var agentTargetsByMode = map[string]agentModeTargets{
	"iptables": {g: 100 * time.Millisecond, i: 50 * time.Millisecond, h: 0.5},
	"nftables": {g: 50 * time.Millisecond, i: 50 * time.Millisecond, h: 0.3},
}

// agentTargets judges (g)-(i)'s targets for the agent at its defaults
// (changes) and at the same settings as kube-proxy (cold sync).
func agentTargets(d agentData) []string {
	var out []string
	for _, sc := range d.Scenarios {
		for _, p := range sc.Proxies {
			if !strings.HasPrefix(p.Proxy, "svcnet") || len(p.Runs) == 0 {
				continue
			}
			t := agentTargetsByMode[p.Mode]
			switch {
			case p.Compare == "" && sc.Name[1] == 'g':
				out = append(out, changeTarget(fmt.Sprintf("(g) %s mode, the agent at its defaults: a change at %d Services", p.Mode, sc.Services), t.g, p.Runs))
			case p.Compare == "" && sc.Services == 10000:
				out = append(out, changeTarget(fmt.Sprintf("(i) %s mode, the agent at its defaults: a change at %d Services", p.Mode, sc.Services), t.i, p.Runs))
			case p.Compare == "":
				out = append(out, fmt.Sprintf("(i) %s mode: a change at 10000 Services within %s p99: not judged, this mode ran at %d Services.", p.Mode, t.i, sc.Services))
			case sc.Name[1] == 'h':
				u, ok := agentProxy(sc, p.Compare)
				if !ok {
					continue
				}
				r := ratio(median(scaleRow{Runs: p.Runs}.values(coldSyncSeconds)), median(scaleRow{Runs: u.Runs}.values(coldSyncSeconds)))
				out = append(out, fmt.Sprintf("(h) %s mode: a cold sync at most %.1fx kube-proxy's at the same settings, at %d Services: %.2fx, %s.",
					p.Mode, t.h, sc.Services, r, verdict(r <= t.h)))
			}
		}
	}
	return out
}

// changeTarget judges "what within target p99" on every change of runs:
// the p99 where at least ten changes lie beyond it, else the slowest.
func changeTarget(what string, target time.Duration, runs []agentResult) string {
	var all []time.Duration
	for _, r := range runs {
		all = append(all, r.Latencies...)
	}
	if len(all) >= 1000 {
		p99 := percentile(all, 0.99)
		return fmt.Sprintf("%s within %s p99: %.1f ms over %d changes, %s.", what, target, millis(p99), len(all), verdict(p99 <= target))
	}
	slowest := slices.Max(all)
	return fmt.Sprintf("%s within %s p99, judged on the slowest of the %d changes (too few for a p99): %.1f ms, %s.", what, target, len(all),
		millis(slowest), verdict(slowest <= target))
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func iptablesVersion() string {
	out, err := exec.Command("iptables", "--version").Output()
	if err != nil {
		return "version unknown"
	}
	return strings.TrimSpace(string(out))
}

func nftVersion() string {
	out, err := exec.Command("nft", "--version").Output()
	if err != nil {
		return "nft: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}
