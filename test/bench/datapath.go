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
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
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
	// note says more of the rules, in the table.
	note string
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

// iptablesRules restores an iptables-restore file, without --noflush:
// the node's tables hold nothing else. The nfacct counters its rules
// count into (kube-proxy creates them over netlink before its first
// restore) are created first.
func iptablesRules(file string) func(context.Context, *dpLab) error {
	return func(_ context.Context, l *dpLab) error {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		acct := nfacct.New(netlab.Path(l.node.NetNS))
		for _, name := range nfacctNames(string(data)) {
			if err := acct.Ensure(name); err != nil {
				return fmt.Errorf("nfacct counter %s: %w", name, err)
			}
		}
		if out, err := l.lab.Run(l.node.NetNS, "iptables-restore", "-w", "5", file); err != nil {
			return fmt.Errorf("iptables-restore %s: %w: %s", file, err, strings.Join(strings.Fields(firstLines(out, 5)), " "))
		}
		return nil
	}
}

// nfacctNames are the nfacct counters an iptables-restore input's rules
// name.
func nfacctNames(rules string) []string {
	var names []string
	for _, f := range strings.Split(rules, "--nfacct-name ")[1:] {
		name, _, _ := strings.Cut(f, " ")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
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

// runDatapath measures each ruleset at one size repeats times, the
// rulesets taking turns, each time in a new lab, and profiles its
// connections when perf is there.
func runDatapath(ctx context.Context, services int, d *datapathServices, rules []dpRules, repeats int) []dpRun {
	var runs []dpRun
	for repeat := range repeats {
		for _, r := range rules {
			row := dpRow{services: services, rules: r.name}
			progress("(m) %d Services: %s (run %d/%d)\n", services, r.name, repeat+1, repeats)
			prof, err := runDatapathOne(ctx, &row, d, r)
			if err != nil {
				row.err = err.Error()
				progress("(m) %d Services, %s: %v\n", services, r.name, err)
			}
			runs = append(runs, dpRunOf(row, r.note, prof))
		}
	}
	return runs
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

func pct(lat []int64, p float64) int64 {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
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

// dpRun is one measurement of one ruleset at one size, as recorded: the
// quantiles of its probes rather than their 20,000 samples each.
type dpRun struct {
	Services int    `json:"services"`
	Rules    string `json:"rules"`
	Note     string `json:"note,omitempty"`
	// Load is how long loading the rules took.
	Load time.Duration  `json:"load,omitempty"`
	TCP  dpProbeFigures `json:"tcp"`
	UDP  dpProbeFigures `json:"udp"`
	// Parallel is the parallel TCP clients' run: connections, seconds,
	// the client's and server's CPU seconds and the client's system CPU.
	Parallel dpParallelFigures `json:"parallel"`
	// Profile is the client's CPU per connection in µs by where it goes,
	// under perf ("total" and each cpuCategory).
	Profile map[string]float64 `json:"profile,omitempty"`
	Err     string             `json:"err,omitempty"`
}

// dpProbeFigures are a sequential probe's figures.
type dpProbeFigures struct {
	Count    int           `json:"count"`
	Failures int           `json:"failures"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
}

type dpParallelFigures struct {
	Connections int     `json:"connections"`
	Seconds     float64 `json:"seconds"`
	CPU         float64 `json:"cpu"`
	SystemCPU   float64 `json:"systemCPU"`
}

func dpRunOf(row dpRow, note string, prof *dpProfile) dpRun {
	probe := func(p probeResult) dpProbeFigures {
		return dpProbeFigures{Count: len(p.Latencies), Failures: p.Failures, P50: time.Duration(pct(p.Latencies, 0.5)), P99: time.Duration(pct(p.Latencies, 0.99))}
	}
	r := dpRun{Services: row.services, Rules: row.rules, Note: note, Load: row.load, TCP: probe(row.tcpSeq), UDP: probe(row.udpSeq), Err: row.err,
		Parallel: dpParallelFigures{Connections: len(row.tcpPar.Latencies), Seconds: row.tcpPar.Seconds,
			CPU: row.tcpPar.UserCPU + row.tcpPar.SystemCPU + row.serverCPU, SystemCPU: row.tcpPar.SystemCPU}}
	if prof != nil {
		r.Profile = map[string]float64{"total": prof.total}
		for k, v := range prof.by {
			r.Profile[k] = v
		}
	}
	return r
}

// datapathData is (m)'s record.
type datapathData struct {
	Repeats      int           `json:"repeats"`
	Sequential   int           `json:"sequential"`
	Clients      int           `json:"clients"`
	ClientsTime  time.Duration `json:"clientsTime"`
	ClientsLimit int           `json:"clientsLimit"`
	ProfileCount int           `json:"profileCount"`
	Runs         []dpRun       `json:"runs"`
}

const datapathTitle = "## Datapath: a new connection through each proxy's rules (m)"

// renderDatapath writes (m) from its record alone.
func renderDatapath(rec *record[datapathData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(datapathTitle))
	fmt.Fprintf(&b, "A scratch node namespace holds the rules of one proxy for N Services x 10 endpoints (plus a TCP and a UDP "+
		"Service of 10 endpoints that the clients use); a client Pod and a server Pod (owning every endpoint address through a "+
		"local route) hang off it by veth, so every first packet crosses the node's PREROUTING (where the Service is chosen), "+
		"FORWARD and POSTROUTING hooks and conntrack, as Pod-to-Service traffic does. The nftables tables are the ones svcnet's "+
		"agent and kube-proxy (%s) wrote in (n) at the same size, listed from their nodes with `nft list table` and loaded as they are. "+
		"The iptables ruleset is kube-proxy's own, in iptables mode on a node of its own against the same API server: the input of "+
		"its first iptables-restore, read from its log at V(9), with the jumps from the built-in chains it had inserted by then, "+
		"restored at once without --noflush (its own cold sync of such a ruleset runs for many minutes, (h)). kube-proxy orders "+
		"KUBE-SERVICES by map iteration, and a first packet walks the rule of every Service before its own: the rules column says "+
		"where it put the Service the clients use. The nftables layouts find the Service in a map wherever it is. The client is "+
		"a process of its own in the client Pod: %d new TCP connections one after the other (connect() until the SYN-ACK is back; "+
		"then a reset, so no TIME_WAIT is left), then %d clients in parallel for %s (at most %d connections), then %d UDP "+
		"one-datagram exchanges (a new socket each, so a new conntrack flow). Connections per CPU second divide the parallel run's "+
		"connections by the CPU time the client and server processes used, the kernel's share included: on veth the node's hooks "+
		"and the server's stack run in the softirq of the sending thread, which the kernel accounts to it; the kernel column is "+
		"the client's system time per connection. Each ruleset is measured %d times at each size, in a new node each time, the "+
		"rulesets taking turns; a cell is the median of the runs with the smallest and largest. %s\n\n",
		rec.Tools["kube-proxy"], d.Sequential, d.Clients, d.ClientsTime, d.ClientsLimit, d.Sequential, d.Repeats, rec.loadNote())
	b.WriteString("| Services x 10 endpoints | rules | runs | loaded in (s) | TCP connect p50 (µs) | p99 (µs) | connections/s (4 clients) | " +
		"per CPU second | kernel µs per connection | UDP exchange p50 (µs) | p99 (µs) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	groups := dpGroups(d.Runs)
	for _, g := range groups {
		ok := runsWhere(g, func(r dpRun) bool { return r.Err == "" })
		name := g[0].Rules
		if g[0].Note != "" {
			name += " (" + g[0].Note + ")"
		}
		if len(ok) == 0 {
			fmt.Fprintf(&b, "| %d | %s | 0 of %d | not measured: %s | | | | | | | |\n", g[0].Services, name, len(g), oneLine(g[0].Err))
			continue
		}
		runs := fmt.Sprintf("%d", len(ok))
		if len(ok) < len(g) {
			runs = fmt.Sprintf("%d of %d", len(ok), len(g))
		}
		us := func(f func(dpRun) time.Duration) string {
			return spreadOf(column(ok, func(r dpRun) float64 { return float64(f(r).Nanoseconds()) / 1000 }), "%.1f")
		}
		load := "-"
		if ok[0].Load > 0 {
			load = spreadOf(column(ok, func(r dpRun) float64 { return r.Load.Seconds() }), "%.1f")
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g[0].Services, name, runs, load,
			us(func(r dpRun) time.Duration { return r.TCP.P50 }), us(func(r dpRun) time.Duration { return r.TCP.P99 }),
			spreadOf(column(ok, func(r dpRun) float64 { return float64(r.Parallel.Connections) / r.Parallel.Seconds }), "%.0f"),
			spreadOf(column(ok, func(r dpRun) float64 { return float64(r.Parallel.Connections) / r.Parallel.CPU }), "%.0f"),
			spreadOf(column(ok, func(r dpRun) float64 { return r.Parallel.SystemCPU / float64(r.Parallel.Connections) * 1e6 }), "%.1f"),
			us(func(r dpRun) time.Duration { return r.UDP.P50 }), us(func(r dpRun) time.Duration { return r.UDP.P99 }))
	}
	b.WriteString("\nPublished, for comparison: the Kubernetes blog's announcement of kube-proxy's nftables mode " +
		"(https://kubernetes.io/blog/2025/02/28/nftables-kube-proxy/, 2025) charts kube-proxy's first-packet latency at 5,000, " +
		"10,000 and 30,000 Services, measured by its authors: growing with the number of Services in iptables mode, about flat " +
		"in nftables mode, whose p99 at 30,000 Services is below iptables mode's p01. Theirs is a first packet's time through " +
		"the node, ours a whole connect() from a Pod; compare the growth with the number of Services, and each row with the " +
		"no-Service baseline of the same size.\n")
	writeProfileTable(&b, d, groups)
	b.WriteString("\nTargets, judged on the medians above (met only if the median meets it):\n\n")
	for _, line := range datapathTargets(groups) {
		b.WriteString("- " + line + "\n")
	}
	return b.String()
}

// dpGroups are the runs of each size and ruleset, in the order they
// first ran.
func dpGroups(runs []dpRun) [][]dpRun {
	var out [][]dpRun
	for _, r := range runs {
		i := slices.IndexFunc(out, func(g []dpRun) bool { return g[0].Services == r.Services && g[0].Rules == r.Rules })
		if i < 0 {
			out = append(out, []dpRun{r})
			continue
		}
		out[i] = append(out[i], r)
	}
	slices.SortStableFunc(out, func(a, b []dpRun) int { return a[0].Services - b[0].Services })
	return out
}

// writeProfileTable writes where a connection's CPU goes per ruleset,
// the median of the profiled runs.
func writeProfileTable(b *strings.Builder, d datapathData, groups [][]dpRun) {
	var rows []string
	for _, g := range groups {
		prof := runsWhere(g, func(r dpRun) bool { return r.Profile != nil })
		if len(prof) == 0 {
			continue
		}
		cell := func(k string) string {
			return fmt.Sprintf("%.1f", median(column(prof, func(r dpRun) float64 { return r.Profile[k] })))
		}
		rows = append(rows, fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %s | %s |\n", g[0].Services, g[0].Rules, cell("total"),
			cell("rules"), cell("conntrack"), cell("nat"), cell("kernel"), cell("user")))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWhere a connection's CPU goes: the client run again under `perf record -e cpu-clock` (%d connections one after "+
		"the other), its samples sorted by symbol into rule evaluation (nft_do_chain and the set, map and expression "+
		"functions; ipt_do_table and the xtables matches in iptables mode), conntrack, NAT, the rest of the kernel (the TCP "+
		"handshake, veth, routing, the server's side) and the client's user time, in µs of the client's CPU per connection, "+
		"the median of the runs.\n\n", d.ProfileCount)
	b.WriteString("| Services x 10 endpoints | rules | client CPU per connection | rule evaluation | conntrack | NAT | rest of the kernel | user |\n" +
		"|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r)
	}
}

// (m)'s targets: svcnet's table costs a new connection the same at the
// largest size as at the smallest, and little over no rules at all.
const (
	dpTargetGrowth   = 1.1
	dpTargetOverhead = 5 * time.Microsecond
)

// datapathTargets judges (m)'s targets on svcnet's nftables rows and the
// no-Service baseline, at the smallest and largest sizes measured.
func datapathTargets(groups [][]dpRun) []string {
	med := func(services int, rules string, f func(dpRun) time.Duration) (float64, bool) {
		for _, g := range groups {
			ok := runsWhere(g, func(r dpRun) bool { return r.Err == "" })
			if g[0].Services == services && g[0].Rules == rules && len(ok) > 0 {
				return median(column(ok, func(r dpRun) float64 { return float64(f(r).Nanoseconds()) / 1000 })), true
			}
		}
		return 0, false
	}
	if len(groups) == 0 {
		return []string{"Not judged: nothing was measured."}
	}
	small, large := groups[0][0].Services, groups[len(groups)-1][0].Services
	p50 := func(r dpRun) time.Duration { return r.TCP.P50 }
	p99 := func(r dpRun) time.Duration { return r.TCP.P99 }
	var out []string
	a, ok1 := med(small, dpSvcnetRules, p99)
	z, ok2 := med(large, dpSvcnetRules, p99)
	if ok1 && ok2 && small != large {
		out = append(out, fmt.Sprintf("A new connection through svcnet's table costs the same at %d Services as at %d (connect p99 within %.1fx): "+
			"%.1f against %.1f µs, %.2fx, %s.", large, small, dpTargetGrowth, z, a, ratio(z, a), verdict(z <= dpTargetGrowth*a)))
	} else {
		out = append(out, "A new connection through svcnet's table at the largest size against the smallest: not judged, one size only.")
	}
	for _, q := range []struct {
		name string
		f    func(dpRun) time.Duration
	}{{"p50", p50}, {"p99", p99}} {
		s, ok1 := med(large, dpSvcnetRules, q.f)
		base, ok2 := med(large, dpBaselineRules, q.f)
		if !ok1 || !ok2 {
			continue
		}
		out = append(out, fmt.Sprintf("Connect %s through svcnet's table within %s of the no-Service baseline at %d Services: %.1f against %.1f µs, %s.",
			q.name, dpTargetOverhead, large, s, base, verdict(s-base <= float64(dpTargetOverhead.Nanoseconds())/1000)))
	}
	return out
}

// The rulesets (m)'s targets compare.
const (
	dpBaselineRules = "no Service: client to the Pod, no rules"
	dpSvcnetRules   = "svcnet nftables"
)
