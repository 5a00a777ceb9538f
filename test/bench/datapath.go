// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// The datapath benchmark (m): what a new connection costs through each
// proxy's rules. A scratch node namespace holds the rules, a client Pod
// and a server Pod hang off it (the server owns every endpoint address
// through a local route); the client makes new TCP connections, and UDP
// one-datagram exchanges, to one Service of 10 endpoints, so that every
// first packet crosses the node's PREROUTING (where the Service is
// chosen and DNATed), FORWARD and POSTROUTING hooks and conntrack.
const (
	dpSequential  = 20000
	dpClients     = 4
	dpClientsTime = 4 * time.Second
	// dpClientsLimit keeps a parallel run's connections under the
	// conntrack table's room (its entries stay 10 s after the reset that
	// ends each connection) and the client's ports.
	dpClientsLimit = 50000
	dpUDPPort      = 53
)

// datapathServices are the Services the datapath benchmark connects to.
type datapathServices struct {
	tcp, udp             *corev1.Service
	tcpEndpoints, udpEPs []string
}

// addDatapathServices creates the Services the clients use, named to sort
// after every other: the iptables layout's KUBE-SERVICES holds one rule
// per Service port in that order (svcnet's render sorts by name;
// kube-proxy's follows map iteration), so a first packet to them walks
// all the others' rules, the worst case of that layout.
func (w *agentWorld) addDatapathServices(ctx context.Context) (*datapathServices, error) {
	d := &datapathServices{}
	for range 10 {
		d.tcpEndpoints = append(d.tcpEndpoints, w.endpointIP())
		d.udpEPs = append(d.udpEPs, w.endpointIP())
	}
	var err error
	if d.tcp, err = w.addServicePort(ctx, "zz-datapath-tcp", corev1.ProtocolTCP, 80, d.tcpEndpoints); err != nil {
		return nil, err
	}
	if d.udp, err = w.addServicePort(ctx, "zz-datapath-udp", corev1.ProtocolUDP, dpUDPPort, d.udpEPs); err != nil {
		return nil, err
	}
	return d, nil
}

// dpRules is one way of programming the datapath node.
type dpRules struct {
	name string
	// load programs the node (nil: no rules at all).
	load func(ctx context.Context, l *dpLab) error
	// direct connects to the first endpoint instead of the Service.
	direct bool
}

// dpRow is one ruleset's measurements at one size.
type dpRow struct {
	services int
	rules    string
	load     time.Duration
	tcpSeq   probeResult
	tcpPar   probeResult
	udpSeq   probeResult
	// serverCPU is the server process's CPU seconds during tcpPar.
	serverCPU float64
	err       string
}

// dpLab is the datapath benchmark's node with its client and server Pods.
type dpLab struct {
	lab            *netlab.Lab
	node           *netlab.Node
	server, client *netlab.Pod
}

func newDPLab() (*dpLab, error) {
	lab, err := netlab.New(fmt.Sprintf("svcnet-dp%04d", rand.IntN(10000)))
	if err != nil {
		return nil, err
	}
	l := &dpLab{lab: lab}
	fail := func(err error) (*dpLab, error) { lab.Close(); return nil, err }
	if l.node, err = lab.AddNode("dpnode", netip.MustParsePrefix("192.168.62.10/24"), netip.MustParsePrefix("10.239.250.0/24"),
		netip.MustParsePrefix(agentServiceCIDR)); err != nil {
		return fail(err)
	}
	if l.server, err = l.node.NewPod("dpserver", netip.MustParseAddr("10.239.250.2")); err != nil {
		return fail(err)
	}
	if err := l.server.AddRange(agentEndpointRange); err != nil {
		return fail(err)
	}
	if l.client, err = l.node.NewPod("dpclient", netip.MustParseAddr("10.239.250.3")); err != nil {
		return fail(err)
	}
	for ns, sysctls := range map[string][]string{
		l.server.NetNS: {"net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"},
		l.client.NetNS: {"net.ipv4.ip_local_port_range=1024 65535"},
	} {
		for _, s := range sysctls {
			if out, err := lab.Run(ns, "sysctl", "-qw", s); err != nil {
				return fail(fmt.Errorf("sysctl %s: %w: %s", s, err, out))
			}
		}
	}
	return l, nil
}

// startServer starts the datapath server in the server Pod.
func (l *dpLab) startServer() (*exec.Cmd, io.WriteCloser, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe, "-datapath-role=server", "-datapath-port="+strconv.Itoa(agentPort))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := netns.Do(netlab.Path(l.server.NetNS), cmd.Start); err != nil {
		return nil, nil, err
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		_ = stdin.Close()
		_ = cmd.Wait()
		if err != nil {
			return nil, nil, fmt.Errorf("datapath server did not start: %q: %w", line, err)
		}
		return nil, nil, fmt.Errorf("datapath server did not start: %q", line)
	}
	return cmd, stdin, nil
}

// probe runs the datapath client in the client Pod.
func (l *dpLab) probe(ctx context.Context, target, proto string, count int) (probeResult, error) {
	var res probeResult
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, exe, "-datapath-role=client", "-datapath-target="+target, "-datapath-proto="+proto,
		"-datapath-count="+strconv.Itoa(count), "-datapath-parallel="+strconv.Itoa(dpClients),
		"-datapath-duration="+dpClientsTime.String(), "-datapath-limit="+strconv.Itoa(dpClientsLimit))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := netns.Run(netlab.Path(l.client.NetNS), cmd); err != nil {
		return res, fmt.Errorf("datapath client: %w", err)
	}
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		return res, fmt.Errorf("datapath client's answer %q: %w", out.String(), err)
	}
	if len(res.Latencies) == 0 {
		return res, fmt.Errorf("no %s exchange to %s succeeded (%d failed)", proto, target, res.Failures)
	}
	return res, nil
}

// flushConntrack forgets the node's flows between runs.
func (l *dpLab) flushConntrack() {
	_, _ = l.lab.Run(l.node.NetNS, "conntrack", "-F")
}

// measure runs every probe against one ruleset.
func (l *dpLab) measure(ctx context.Context, row *dpRow, d *datapathServices, direct bool) error {
	tcpTarget := d.tcp.Spec.ClusterIP + ":80"
	udpTarget := d.udp.Spec.ClusterIP + ":" + strconv.Itoa(dpUDPPort)
	if direct {
		tcpTarget = d.tcpEndpoints[0] + ":" + strconv.Itoa(agentPort)
		udpTarget = d.udpEPs[0] + ":" + strconv.Itoa(agentPort)
	}
	server, stdin, err := l.startServer()
	if err != nil {
		return err
	}
	defer func() { _ = stdin.Close(); _ = server.Wait() }()
	l.flushConntrack()
	if row.tcpSeq, err = l.probe(ctx, tcpTarget, "tcp", dpSequential); err != nil {
		return err
	}
	l.flushConntrack()
	before := pidCPUSeconds(server.Process.Pid)
	if row.tcpPar, err = l.probe(ctx, tcpTarget, "tcp", 0); err != nil {
		return err
	}
	row.serverCPU = pidCPUSeconds(server.Process.Pid) - before
	l.flushConntrack()
	if row.udpSeq, err = l.probe(ctx, udpTarget, "udp", dpSequential); err != nil {
		return err
	}
	return nil
}

// nftRules loads a table nft listed from a proxy's node.
func nftRules(file string) func(context.Context, *dpLab) error {
	return func(_ context.Context, l *dpLab) error {
		if out, err := l.lab.Run(l.node.NetNS, "nft", "-f", file); err != nil {
			return fmt.Errorf("nft -f %s: %w: %s", file, err, firstLines(out, 5))
		}
		return nil
	}
}

// iptablesRules restores a ruleset written by iptablesRestoreFile.
func iptablesRules(file string) func(context.Context, *dpLab) error {
	return func(_ context.Context, l *dpLab) error {
		if out, err := l.lab.Run(l.node.NetNS, "iptables-restore", "-w", "5", file); err != nil {
			return fmt.Errorf("iptables-restore %s: %w: %s", file, err, firstLines(out, 5))
		}
		return nil
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// capturedRestore is an iptables.Interface that keeps what a full sync
// would restore, over tables holding nothing yet.
type capturedRestore struct{ data []byte }

func (c *capturedRestore) Restore(_ context.Context, data []byte) error {
	c.data = append(c.data[:0], data...)
	return nil
}

func (c *capturedRestore) Save(_ context.Context, table string) ([]byte, error) {
	return []byte("*" + table + "\nCOMMIT\n"), nil
}

func (c *capturedRestore) ChainRules(context.Context, string, string) ([]string, bool, error) {
	return nil, false, nil
}

// iptablesRestoreFile renders the world's Services with svcnet's iptables
// backend (kube-proxy's chains, names and rules) into an iptables-restore
// file. A scratch node restores it at once, without --noflush: the
// proxies' own cold syncs of such rulesets run for many minutes
// (docs/BENCHMARKS.md (h)).
func iptablesRestoreFile(ctx context.Context, w *agentWorld, path string) error {
	var services corev1.ServiceList
	if err := w.env.Client.List(ctx, &services, client.InNamespace(w.ns)); err != nil {
		return err
	}
	var list discoveryv1.EndpointSliceList
	if err := w.env.Client.List(ctx, &list, client.InNamespace(w.ns)); err != nil {
		return err
	}
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for i := range list.Items {
		name := list.Items[i].Labels[discoveryv1.LabelServiceName]
		byService[name] = append(byService[name], &list.Items[i])
	}
	capture := &capturedRestore{}
	cidr := netip.MustParsePrefix(agentClusterCIDR)
	b := iptables.NewBackend(corev1.IPv4Protocol, capture, iptables.Config{ClusterCIDRs: []netip.Prefix{cidr}})
	node := model.Node{Name: "dpnode"}
	for i := range services.Items {
		svc := &services.Items[i]
		b.SetService(client.ObjectKeyFromObject(svc), model.BuildService(corev1.IPv4Protocol, node, svc, byService[svc.Name], model.Options{}))
	}
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		return err
	}
	return os.WriteFile(path, capture.data, 0o644)
}

// dumpTable lists a proxy's nftables table from its node into a file.
func dumpTable(w *agentWorld, table, path string) func(*benchNode) error {
	return func(n *benchNode) error {
		out, err := w.lab.Run(n.node.NetNS, "nft", "list", "table", "ip", table)
		if err != nil {
			return fmt.Errorf("nft list table ip %s: %w: %s", table, err, firstLines(out, 5))
		}
		return os.WriteFile(path, []byte(out), 0o644)
	}
}

// runDatapath measures each ruleset at one size, each in a new lab, and
// profiles its connections when perf is there.
func runDatapath(ctx context.Context, services int, d *datapathServices, rules []dpRules) ([]dpRow, []dpProfile) {
	var rows []dpRow
	var profiles []dpProfile
	for _, r := range rules {
		row := dpRow{services: services, rules: r.name}
		progress("(m) %d Services: %s\n", services, r.name)
		prof, err := runDatapathOne(ctx, &row, d, r)
		if err != nil {
			row.err = err.Error()
			progress("(m) %d Services, %s: %v\n", services, r.name, err)
		}
		if prof != nil {
			profiles = append(profiles, *prof)
		}
		rows = append(rows, row)
	}
	return rows, profiles
}

func runDatapathOne(ctx context.Context, row *dpRow, d *datapathServices, r dpRules) (*dpProfile, error) {
	l, err := newDPLab()
	if err != nil {
		return nil, err
	}
	defer l.lab.Close()
	if r.load != nil {
		start := time.Now()
		if err := r.load(ctx, l); err != nil {
			return nil, err
		}
		row.load = time.Since(start)
	}
	if err := l.measure(ctx, row, d, r.direct); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("perf"); err != nil {
		return nil, nil
	}
	server, stdin, err := l.startServer()
	if err != nil {
		return nil, err
	}
	defer func() { _ = stdin.Close(); _ = server.Wait() }()
	l.flushConntrack()
	target := d.tcp.Spec.ClusterIP + ":80"
	if r.direct {
		target = d.tcpEndpoints[0] + ":" + strconv.Itoa(agentPort)
	}
	by, total, err := l.profile(ctx, target)
	if err != nil {
		progress("(m) profiling %s: %v\n", r.name, err)
		return nil, nil
	}
	return &dpProfile{services: row.services, rules: r.name, total: total, by: by}, nil
}

func usDuration(ns int64) string {
	return fmt.Sprintf("%.1f µs", float64(ns)/1000)
}

func pct(lat []int64, p float64) int64 {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
}

// writeDatapathTable writes (m)'s rows.
func writeDatapathTable(b *strings.Builder, rows []dpRow) {
	b.WriteString("| Services x 10 endpoints | rules | loaded in | TCP connect p50 | p99 | connections/s (4 clients) | per CPU second | kernel µs per connection | UDP exchange p50 | p99 |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(b, "| %d | %s | not measured: %s | | | | | | | |\n", r.services, r.rules, strings.ReplaceAll(firstLines(r.err, 1), "|", "/"))
			continue
		}
		load := "-"
		if r.load > 0 {
			load = r.load.Round(100 * time.Millisecond).String()
		}
		par := r.tcpPar
		conns := float64(len(par.Latencies))
		cpu := par.UserCPU + par.SystemCPU + r.serverCPU
		perCore, kernel := 0.0, 0.0
		if conns > 0 && cpu > 0 {
			perCore = conns / cpu
			kernel = par.SystemCPU / conns * 1e6
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %.0f | %.0f | %.1f | %s | %s |\n", r.services, r.rules, load,
			usDuration(pct(r.tcpSeq.Latencies, 0.5)), usDuration(pct(r.tcpSeq.Latencies, 0.99)),
			conns/par.Seconds, perCore, kernel,
			usDuration(pct(r.udpSeq.Latencies, 0.5)), usDuration(pct(r.udpSeq.Latencies, 0.99)))
	}
}

// datapathFile is where a size's rules are kept between (n) and (m).
func datapathFile(dir, what string, services int) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%d", what, services))
}

// dpProfileCount is the number of connections a profiled client makes:
// enough that the process's own start is a small part of the samples.
const dpProfileCount = 20000

// cpuCategories sorts a kernel or user symbol into where a connection's
// CPU goes.
func cpuCategory(sym string, kernel bool) string {
	switch {
	case !kernel:
		return "user"
	case strings.HasPrefix(sym, "nf_nat") || strings.HasPrefix(sym, "__nf_nat") || strings.HasPrefix(sym, "nf_xfrm"):
		return "nat"
	case strings.HasPrefix(sym, "nf_conntrack") || strings.HasPrefix(sym, "__nf_conntrack") || strings.HasPrefix(sym, "nf_ct_") ||
		strings.HasPrefix(sym, "__nf_ct") || strings.HasPrefix(sym, "nf_confirm") || strings.HasPrefix(sym, "hash_conntrack") ||
		sym == "tcp_in_window" || strings.HasPrefix(sym, "nf_ct"):
		return "conntrack"
	case strings.HasPrefix(sym, "nft_") || strings.HasPrefix(sym, "__nft_") || strings.HasPrefix(sym, "nf_tables") ||
		strings.HasPrefix(sym, "ipt_") || strings.HasPrefix(sym, "xt_") || strings.HasPrefix(sym, "iptable_") ||
		strings.HasPrefix(sym, "nf_hook_slow") || strings.HasPrefix(sym, "pipapo"):
		return "rules"
	}
	return "kernel"
}

// dpProfile is where a client's CPU per connection goes, in µs.
type dpProfile struct {
	services int
	rules    string
	total    float64
	by       map[string]float64
}

// profile runs a client under perf (cpu-clock samples of its process,
// the softirq work done in its context included) and splits its measured
// CPU per connection by cpuCategory.
func (l *dpLab) profile(ctx context.Context, target string) (map[string]float64, float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, 0, err
	}
	data := filepath.Join(os.TempDir(), fmt.Sprintf("svcnet-dp-%d.perf", rand.IntN(1e9)))
	defer os.Remove(data)
	cmd := exec.CommandContext(ctx, "perf", "record", "-q", "-e", "cpu-clock", "-F", "10000", "-o", data, "--",
		exe, "-datapath-role=client", "-datapath-target="+target, "-datapath-proto=tcp", "-datapath-count="+strconv.Itoa(dpProfileCount))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := netns.Run(netlab.Path(l.client.NetNS), cmd); err != nil {
		return nil, 0, fmt.Errorf("perf record: %w", err)
	}
	var res probeResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil || len(res.Latencies) == 0 {
		if err != nil {
			return nil, 0, fmt.Errorf("profiled client's answer %q: %w", out.String(), err)
		}
		return nil, 0, fmt.Errorf("profiled client's answer %q has no connections", out.String())
	}
	perConn := (res.UserCPU + res.SystemCPU) / float64(len(res.Latencies)) * 1e6
	report, err := exec.CommandContext(ctx, "perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "sym", "-q").Output()
	if err != nil {
		return nil, 0, fmt.Errorf("perf report: %w", err)
	}
	shares := map[string]float64{}
	var total float64
	for _, line := range strings.Split(string(report), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		share, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		shares[cpuCategory(f[2], f[1] == "[k]")] += share
		total += share
	}
	by := map[string]float64{}
	for k, v := range shares {
		if total > 0 {
			by[k] = v / total * perConn
		}
	}
	return by, perConn, nil
}

// writeProfileTable writes where a connection's CPU goes per ruleset.
func writeProfileTable(b *strings.Builder, rows []dpProfile) {
	b.WriteString("| Services x 10 endpoints | rules | client CPU per connection | rule evaluation | conntrack | NAT | rest of the kernel | user |\n" +
		"|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(b, "| %d | %s | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.1f µs | %.1f µs |\n", r.services, r.rules, r.total,
			r.by["rules"], r.by["conntrack"], r.by["nat"], r.by["kernel"], r.by["user"])
	}
}
