// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The node agent at cluster scale, nftables mode (n), and what a new
// connection costs through each proxy's rules at the same sizes (m). For
// each size one API server holds the Services; svcnet's agent and
// kube-proxy each program a node of their own as in (h)/(i), and the
// tables they wrote are listed from their nodes and loaded, as they are,
// into the datapath benchmark's scratch node.
var scaleServices = flag.String("scale-services", "1000,10000,30000,50000", "Service counts of the scale (n) and datapath (m) benchmarks, comma separated")

// scaleKubeProxyMax is the largest size kube-proxy runs at: its nftables
// cold sync, and loading its table into the datapath node, grow faster
// than the Services (docs/BENCHMARKS.md (n)), so that a larger run may
// want it bounded.
var scaleKubeProxyMax = flag.Int("scale-kube-proxy-max", 0, "the largest Service count at which the scale (n) and datapath (m) benchmarks run kube-proxy (0: every size)")

// scaleRepeats is how many times each proxy runs at each size.
var scaleRepeats = flag.Int("scale-repeats", 3, "times each proxy runs at each size of the scale benchmark (n), the proxies taking turns; the table gives medians and spreads")

// scaleChanges is the number of single endpoint changes per run.
const scaleChanges = 20

func scaleSizes(scale int) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(*scaleServices, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-scale-services: %q is not a count", f)
		}
		sizes = append(sizes, max(1, n/scale))
	}
	return sizes, nil
}

// scaleImpls are the proxies of (n): svcnet's agent at its defaults and
// at Go's default collector setting (kube-proxy's), and kube-proxy's
// nftables mode with no minimum sync period (its best case for a change).
func scaleImpls() []agentImpl {
	var out []agentImpl
	for _, impl := range agentImpls() {
		switch impl.name {
		case scaleSvcnet, scaleSvcnet + ", GOGC=100", scaleKubeProxy:
			out = append(out, impl)
		}
	}
	return out
}

// The proxies whose medians (n)'s targets compare.
const (
	scaleSvcnet    = "svcnet agent --mode=nftables"
	scaleKubeProxy = "kube-proxy --proxy-mode=nftables --iptables-min-sync-period=0"
)

// scaleRow is one proxy at one size over every repeat.
type scaleRow struct {
	services int
	impl     string
	// runs are the repeats that finished, errs why the others did not.
	runs []agentResult
	errs []string
	// notRun says why the proxy was not run at this size.
	notRun string
}

func scaleReport(ctx context.Context, root string, scale int, only, skip string) (string, error) {
	wantN, wantM := selected(only, "n"), selected(only, "m")
	var b strings.Builder
	if skip != "" {
		fmt.Fprintf(&b, "## Node agent at scale, and the datapath\n\nNot run: %s.\n", skip)
		return b.String(), nil
	}
	sizes, err := scaleSizes(scale)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "svcnet-bench-scale-")
	if err != nil {
		return "", err
	}
	if os.Getenv("SVCNET_BENCH_KEEP") == "" {
		defer os.RemoveAll(dir)
	}
	load := newLoadSampler()
	var nrows []scaleRow
	var mrows []dpRow
	var profiles []dpProfile
	for _, size := range sizes {
		res, err := scaleOneSize(ctx, root, dir, size, scale, wantM)
		if err != nil {
			return "", err
		}
		nrows, mrows, profiles = append(nrows, res.n...), append(mrows, res.m...), append(profiles, res.profiles...)
		// The report is written when every size is done; the figures so
		// far go to the log, so that a run stopped at a larger size loses
		// none of the smaller ones.
		var sofar strings.Builder
		if wantN {
			writeScaleSection(&sofar, nrows, "(so far)")
		}
		if wantM {
			writeDatapathSection(&sofar, mrows, profiles, "(so far)")
		}
		progress("(n)/(m) done up to %d Services:\n%s\n", size, sofar.String())
	}
	loadNote := load.stop()
	if wantN {
		writeScaleSection(&b, nrows, loadNote)
	}
	if wantM {
		if wantN {
			b.WriteString("\n")
		}
		writeDatapathSection(&b, mrows, profiles, loadNote)
	}
	return b.String(), nil
}

// scaleResults are one size's rows of (n) and (m).
type scaleResults struct {
	n        []scaleRow
	m        []dpRow
	profiles []dpProfile
}

// scaleOneSize runs (n) at one size on a new API server, keeping the
// tables each proxy wrote, then (m) on those tables when wantM.
func scaleOneSize(ctx context.Context, root, dir string, size, scale int, wantM bool) (scaleResults, error) {
	var res scaleResults
	progress("(n)/(m) %d Services: creating the objects\n", size)
	w, err := newAgentWorldFor(ctx, size, true)
	if err != nil {
		return res, err
	}
	dumps, err := scaleRepeatProxies(ctx, root, dir, w, size, scale, &res)
	if err != nil {
		w.close()
		return res, err
	}
	ipt := datapathFile(dir, "iptables.rules", size)
	if wantM {
		if err := iptablesRestoreFile(ctx, w, ipt); err != nil {
			w.close()
			return res, err
		}
	}
	d := w.datapath
	w.close()
	if !wantM {
		return res, nil
	}
	rules := []dpRules{{name: "no Service: client to the Pod, no rules", direct: true}}
	if f, ok := dumps["svcnet"]; ok {
		rules = append(rules,
			dpRules{name: "svcnet nftables", load: nftRules(f)},
			dpRules{name: "svcnet nftables loaded, client to the Pod", load: nftRules(f), direct: true})
	}
	rules = append(rules, dpRules{name: "iptables (svcnet's render of kube-proxy's layout)", load: iptablesRules(ipt)})
	f, kubeProxy := dumps["kube-proxy"]
	if kubeProxy {
		rules = append(rules, dpRules{name: "kube-proxy nftables", load: nftRules(f)})
	}
	res.m, res.profiles = runDatapath(ctx, size, d, rules)
	if !kubeProxy {
		res.m = append(res.m, dpRow{services: size, rules: "kube-proxy nftables", err: "kube-proxy wrote no table at this size (n)"})
	}
	return res, nil
}

// scaleRepeatProxies runs (n) -scale-repeats times at one size, every
// proxy in turn in each repeat, so that a machine that slows down for a
// while slows every proxy alike. It adds a row per proxy to res and
// returns the tables the proxies wrote, by name, for (m).
func scaleRepeatProxies(ctx context.Context, root, dir string, w *agentWorld, size, scale int, res *scaleResults) (map[string]string, error) {
	impls := scaleImpls()
	rows := make([]scaleRow, len(impls))
	for i, impl := range impls {
		rows[i] = scaleRow{services: size, impl: impl.name}
		if !strings.HasPrefix(impl.name, "svcnet") && *scaleKubeProxyMax > 0 && size*scale > *scaleKubeProxyMax {
			rows[i].notRun = fmt.Sprintf("above %d Services (-scale-kube-proxy-max); see its cold sync at the sizes below", *scaleKubeProxyMax)
		}
	}
	dumps := map[string]string{}
	for repeat := range max(1, *scaleRepeats) {
		for i, impl := range impls {
			if rows[i].notRun != "" {
				continue
			}
			run, table, err := scaleOneProxy(ctx, root, dir, w, impl, size, scale, repeat)
			switch {
			case err != nil:
				return nil, err
			case run.err != "":
				rows[i].errs = append(rows[i].errs, run.err)
			default:
				rows[i].runs = append(rows[i].runs, run.res)
				dumps[table] = datapathFile(dir, table+".nft", size)
			}
		}
	}
	res.n = append(res.n, rows...)
	return dumps, nil
}

// scaleRun is one run of one proxy at one size.
type scaleRun struct {
	res agentResult
	err string
}

// scaleOneProxy is (n) for one proxy at one size, once: its result (with
// the failure in err) and the name of the table it wrote, dumped into
// dir for (m).
func scaleOneProxy(ctx context.Context, root, dir string, w *agentWorld, impl agentImpl, size, scale, repeat int) (scaleRun, string, error) {
	table := "kube-proxy"
	if strings.HasPrefix(impl.name, "svcnet") {
		table = "svcnet"
	}
	progress("(n) %d Services with %s, run %d of %d\n", size, impl.name, repeat+1, max(1, *scaleRepeats))
	work, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return scaleRun{}, table, err
	}
	sc := agentScenario{letter: 'n', services: size, changes: scaleChanges / min(scale, scaleChanges), gap: 1200 * time.Millisecond}
	res, err := runAgent(ctx, root, work, w, impl, sc, dumpTable(w, table, datapathFile(dir, table+".nft", size)))
	run := scaleRun{res: res}
	if err != nil {
		run.err = err.Error()
		progress("(n) %d Services, %s: %v\n", size, impl.name, err)
	} else {
		progress("(n) %d Services, %s: cold sync %s, change p99 %s, CPU %.2f s, peak RSS %.0f MiB\n", size, impl.name,
			res.coldSync.Round(time.Millisecond), ms(percentile(res.latencies, 0.99)), res.cpu, res.rssMiB)
	}
	if os.Getenv("SVCNET_BENCH_KEEP") != "" {
		progress("logs kept in %s\n", work)
	} else {
		os.RemoveAll(work)
	}
	return run, table, nil
}

func writeScaleSection(b *strings.Builder, rows []scaleRow, loadNote string) {
	b.WriteString("## Node agent at scale: svcnet agent vs kube-proxy, nftables mode (n)\n\n")
	fmt.Fprintf(b, "As (h) and (i), at each size on a fresh API server: the proxy runs alone in its own node, the cold sync is "+
		"from process start until %s, then %d single endpoint changes, each measured "+
		"from the EndpointSlice write until a connection from the node reaches the new endpoint. Each proxy runs %d times at "+
		"each size, the proxies taking turns; a cell gives the median of the runs and, in brackets, the smallest and the "+
		"largest (change max is the slowest change of all the runs). kube-proxy runs with --iptables-min-sync-period=0, "+
		"its best case for a change. The svcnet agent runs its collector at GOGC=50 unless GOGC is set (its default); the "+
		"GOGC=100 rows are Go's default, kube-proxy's. CPU is the process's user+system time for the whole run including "+
		"the nft children it waited for; RSS its peak. %s\n\n", coldSyncEnd, scaleChanges, max(1, *scaleRepeats), loadNote)
	b.WriteString("| Services x 10 endpoints | proxy | runs | cold sync | change p50 | change p99 | change max | CPU s | peak RSS MiB |\n" +
		"|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(scaleTableRow(r))
	}
	writeScaleTargets(b, rows)
}

// scaleTableRow is one proxy at one size in (n)'s table.
func scaleTableRow(r scaleRow) string {
	prefix := fmt.Sprintf("| %d | %s |", r.services, r.impl)
	switch {
	case r.notRun != "":
		return fmt.Sprintf("%s 0 | not run: %s | | | | | |\n", prefix, r.notRun)
	case len(r.runs) == 0:
		return fmt.Sprintf("%s 0 of %d | did not finish: %s | | | | | |\n", prefix, len(r.errs), oneLine(r.errs[0]))
	}
	runs := fmt.Sprintf("%d", len(r.runs))
	if len(r.errs) > 0 {
		runs = fmt.Sprintf("%d of %d (did not finish: %s)", len(r.runs), len(r.runs)+len(r.errs), oneLine(r.errs[0]))
	}
	return fmt.Sprintf("%s %s | %s | %s | %s | %.1f ms | %s | %s |\n", prefix, runs,
		spreadOf(r.values(coldSyncSeconds), "%.3f s"),
		spreadOf(r.values(changeMs(0.5)), "%.1f ms"), spreadOf(r.values(changeMs(0.99)), "%.1f ms"),
		slices.Max(r.values(changeMs(1))),
		spreadOf(r.values(func(a agentResult) float64 { return a.cpu }), "%.2f"),
		spreadOf(r.values(peakRSS), "%.0f"))
}

func oneLine(s string) string { return strings.ReplaceAll(firstLines(s, 1), "|", "/") }

// values are one figure of every finished run.
func (r scaleRow) values(of func(agentResult) float64) []float64 {
	out := make([]float64, len(r.runs))
	for i, run := range r.runs {
		out[i] = of(run)
	}
	return out
}

func coldSyncSeconds(a agentResult) float64 { return a.coldSync.Seconds() }

func peakRSS(a agentResult) float64 { return a.rssMiB }

// changeMs is a run's change latency at quantile q, in milliseconds (q 1:
// its slowest change).
func changeMs(q float64) func(agentResult) float64 {
	return func(a agentResult) float64 {
		if len(a.latencies) == 0 {
			return math.NaN()
		}
		return float64(percentile(a.latencies, q).Microseconds()) / 1000
	}
}

// median is the middle value, the mean of the two middle ones for an
// even count; NaN for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spreadOf prints the median and, for several values, the smallest and
// the largest: "85 (83-88)".
// column is figure f of each run: one column of a table of runs.
func column[T any](runs []T, f func(T) float64) []float64 {
	vs := make([]float64, len(runs))
	for i, r := range runs {
		vs[i] = f(r)
	}
	return vs
}

// runsWhere are the runs of one side of a table.
func runsWhere[T any](runs []T, side func(T) bool) []T {
	var out []T
	for _, r := range runs {
		if side(r) {
			out = append(out, r)
		}
	}
	return out
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

func spreadOf(vs []float64, format string) string {
	m := fmt.Sprintf(format, median(vs))
	if len(vs) < 2 {
		return m
	}
	return fmt.Sprintf("%s (%s-%s)", m, fmt.Sprintf(format, slices.Min(vs)), fmt.Sprintf(format, slices.Max(vs)))
}

func writeDatapathSection(b *strings.Builder, rows []dpRow, profiles []dpProfile, loadNote string) {
	b.WriteString("## Datapath: a new connection through each proxy's rules (m)\n\n")
	fmt.Fprintf(b, "A scratch node namespace holds the rules of one proxy for N Services x 10 endpoints (plus a TCP and a UDP "+
		"Service of 10 endpoints that the clients use); a client Pod and a server Pod (owning every endpoint address through a "+
		"local route) hang off it by veth, so every first packet crosses the node's PREROUTING (where the Service is chosen), "+
		"FORWARD and POSTROUTING hooks and conntrack, as Pod-to-Service traffic does. The nftables tables are the ones svcnet's "+
		"agent and kube-proxy wrote in (n) at the same size, listed from their nodes with `nft list table` and loaded as they are; "+
		"the iptables ruleset is rendered by svcnet's iptables backend, whose chains, names and rules are kube-proxy's (the "+
		"golden tests hold them to it), and restored at once without --noflush, because the proxies' own cold syncs of such "+
		"rulesets run for many minutes ((h)). The Services the clients use sort after every other, so in the iptables layout a "+
		"first packet walks the KUBE-SERVICES rule of every other Service before its own: that layout's worst case (kube-proxy "+
		"orders that chain by map iteration, so a Service pays about half of it on average); the nftables layouts find the "+
		"Service in a map wherever it is. The client is a process of its own in the client Pod: %d new TCP connections one "+
		"after the other (connect() until the SYN-ACK is back; then a reset, so no TIME_WAIT is left), then %d clients in parallel "+
		"for %s (at most %d connections), then %d UDP one-datagram exchanges (a new socket each, so a new conntrack flow). "+
		"Connections per CPU second divide the parallel run's connections by the CPU time the client and server processes "+
		"used, the kernel's share included: on veth the node's hooks and the server's stack run in the softirq of the sending "+
		"thread, which the kernel accounts to it; the kernel column is the client's system time per connection. %s\n\n",
		dpSequential, dpClients, dpClientsTime, dpClientsLimit, dpSequential, loadNote)
	writeDatapathTable(b, rows)
	b.WriteString("\nUpstream's published figures (the Kubernetes blog's NFTables mode announcement, 2025), first packet latency " +
		"through kube-proxy's rules on their test machines: at 10,000 Services, iptables mode about 62 µs p50 and 257 µs p99, " +
		"nftables mode about 10-15 µs at every size measured; at 30,000 Services, iptables mode about 270 µs p50 and 700 µs p99. " +
		"Their numbers are a first packet's time through the node, ours a whole connect() from a Pod; compare the growth with " +
		"the number of Services, and each row with the no-Service baseline of the same size.\n")
	if len(profiles) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWhere a connection's CPU goes: the client run again under `perf record -e cpu-clock` (%d connections one after "+
		"the other), its samples sorted by symbol into rule evaluation (nft_do_chain and the set, map and expression "+
		"functions; ipt_do_table and the xtables matches in iptables mode), conntrack, NAT, the rest of the kernel (the TCP "+
		"handshake, veth, routing, the server's side) and the client's user time, in µs of the client's CPU per connection.\n\n",
		dpProfileCount)
	writeProfileTable(b, profiles)
}

// (n)'s targets, judged on the medians of the runs.
const (
	scaleTargetServices  = 50000
	scaleTargetColdSync  = 30 * time.Second
	scaleTargetChangeP99 = 20 * time.Millisecond
)

// writeScaleTargets judges (n)'s targets on the medians of the table
// above: the agent's peak RSS below kube-proxy's wherever both ran, and at
// 50,000 Services a cold sync under 30 s and one change under 20 ms p99.
func writeScaleTargets(b *strings.Builder, rows []scaleRow) {
	b.WriteString("\nTargets, judged on the medians above (met only if the median meets it):\n\n")
	for _, line := range scaleTargets(rows) {
		b.WriteString("- " + line + "\n")
	}
}

// scaleTargets are the lines writeScaleTargets writes.
func scaleTargets(rows []scaleRow) []string {
	find := func(size int, impl string) (scaleRow, bool) {
		i := slices.IndexFunc(rows, func(r scaleRow) bool { return r.services == size && r.impl == impl && len(r.runs) > 0 })
		if i < 0 {
			return scaleRow{}, false
		}
		return rows[i], true
	}
	var sizes []int
	for _, r := range rows {
		if !slices.Contains(sizes, r.services) {
			sizes = append(sizes, r.services)
		}
	}
	var rss, cold []string
	for _, size := range sizes {
		agent, ok1 := find(size, scaleSvcnet)
		kp, ok2 := find(size, scaleKubeProxy)
		if !ok1 || !ok2 {
			continue
		}
		a, k := median(agent.values(peakRSS)), median(kp.values(peakRSS))
		rss = append(rss, fmt.Sprintf("%d Services: %.0f against %.0f MiB, %s", size, a, k, verdict(a < k)))
		ca, ck := median(agent.values(coldSyncSeconds)), median(kp.values(coldSyncSeconds))
		cold = append(cold, fmt.Sprintf("%.2fx at %d", ca/ck, size))
	}
	var out []string
	if len(rss) == 0 {
		out = append(out, "Agent peak RSS below kube-proxy's: not judged, no size ran both.")
	} else {
		out = append(out, "Agent peak RSS below kube-proxy's: "+strings.Join(rss, "; ")+".",
			"Agent cold sync as a share of kube-proxy's (no target here; (h)'s is 0.3x): "+strings.Join(cold, ", ")+".")
	}
	agent, ok := find(scaleTargetServices, scaleSvcnet)
	if !ok {
		return append(out, fmt.Sprintf("Cold sync under %s and one change under %s p99 at %d Services: not judged, the agent did not run at that size.",
			scaleTargetColdSync, scaleTargetChangeP99, scaleTargetServices))
	}
	c := median(agent.values(coldSyncSeconds))
	p99 := median(agent.values(changeMs(0.99)))
	return append(out,
		fmt.Sprintf("Cold sync at %d Services under %s: %.1f s, %s.", scaleTargetServices, scaleTargetColdSync, c, verdict(c < scaleTargetColdSync.Seconds())),
		fmt.Sprintf("One endpoint change at %d Services under %s p99: %.1f ms, %s.", scaleTargetServices, scaleTargetChangeP99, p99,
			verdict(p99 < float64(scaleTargetChangeP99.Microseconds())/1000)))
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}
