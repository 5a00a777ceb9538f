// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
		case scaleSvcnet, scaleSvcnetSameSettings, scaleKubeProxy:
			out = append(out, impl)
		}
	}
	return out
}

// The proxies of (n)'s targets: the agent at its defaults, and at the
// same settings as kube-proxy with no minimum sync period.
const (
	scaleSvcnet             = "svcnet agent --mode=nftables"
	scaleSvcnetSameSettings = scaleSvcnet + ", GOGC=100"
	scaleKubeProxy          = "kube-proxy --proxy-mode=nftables --iptables-min-sync-period=0"
)

// scaleRow is one proxy at one size over every repeat.
type scaleRow struct {
	Services int    `json:"services"`
	Proxy    string `json:"proxy"`
	// Runs are the repeats that finished, Errs why the others did not.
	Runs []agentResult `json:"runs"`
	Errs []string      `json:"errs,omitempty"`
	// NotRun says why the proxy was not run at this size.
	NotRun string `json:"notRun,omitempty"`
}

// scaleData is (n)'s record.
type scaleData struct {
	Changes int        `json:"changes"`
	Repeats int        `json:"repeats"`
	Rows    []scaleRow `json:"rows"`
}

func scaleReport(ctx context.Context, root string, scale int, only, skip string, keep bool) (string, error) {
	wantN, wantM := selected(only, "n"), selected(only, "m")
	var b strings.Builder
	if skip != "" {
		fmt.Fprintf(&b, "%s\n\nNot run: %s.\n", scaleTitle, skip)
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
	rec := newRecord[scaleData](root, "n")
	recM := newRecord[datapathData](root, "m")
	for _, r := range []map[string]string{rec.Tools, recM.Tools} {
		r["kube-proxy"], r["nft"] = toolVersion(filepath.Join(root, "bin/k8s/kube-proxy")), nftVersion()
	}
	recM.Tools["iptables"] = iptablesVersion()
	data := scaleData{Changes: scaleChanges / min(scale, scaleChanges), Repeats: *repeats}
	dataM := datapathData{Repeats: *repeats, Sequential: dpSequential, Clients: dpClients, ClientsTime: dpClientsTime,
		ClientsLimit: dpClientsLimit, ProfileCount: dpProfileCount}
	sampler := newLoadSampler()
	for _, size := range sizes {
		res, err := scaleOneSize(ctx, root, dir, size, scale, wantM)
		if err != nil {
			return "", err
		}
		data.Rows, dataM.Runs = append(data.Rows, res.n...), append(dataM.Runs, res.m...)
		// The report is written when every size is done; the figures so
		// far go to the log, so that a run stopped at a larger size loses
		// none of the smaller ones.
		sofar, sofarM := *rec, *recM
		sofar.Data, sofarM.Data = data, dataM
		progress("(n)/(m) done up to %d Services:\n%s\n%s\n", size, renderScale(&sofar), renderDatapath(&sofarM))
	}
	n, err := rec.close(root, sampler, data, keep && wantN, renderScale)
	if err != nil {
		return "", err
	}
	m, err := recM.close(root, sampler, dataM, keep && wantM, renderDatapath)
	if err != nil {
		return "", err
	}
	if wantN {
		b.WriteString(n)
	}
	if wantM {
		if wantN {
			b.WriteString("\n")
		}
		b.WriteString(m)
	}
	return b.String(), nil
}

// scaleResults are one size's rows of (n) and runs of (m).
type scaleResults struct {
	n []scaleRow
	m []dpRun
}

// scaleOneSize runs (n) at one size on a new API server, keeping the
// tables each proxy wrote, then (m) on those tables when wantM, with
// kube-proxy's own iptables ruleset for the same Services.
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
	kubeProxyHere := *scaleKubeProxyMax == 0 || size*scale <= *scaleKubeProxyMax
	ipt, iptNote := datapathFile(dir, "kube-proxy-iptables.rules", size), ""
	if wantM && kubeProxyHere {
		progress("(m) %d Services: kube-proxy's iptables ruleset\n", size)
		if iptNote, err = captureKubeProxyIPTables(ctx, root, dir, w, ipt, w.datapath.tcp.Name); err != nil {
			w.close()
			return res, fmt.Errorf("(m) kube-proxy's iptables ruleset at %d Services: %w", size, err)
		}
	}
	d := w.datapath
	w.close()
	if !wantM {
		return res, nil
	}
	rules := []dpRules{{name: dpBaselineRules, direct: true}}
	if f, ok := dumps["svcnet"]; ok {
		rules = append(rules,
			dpRules{name: dpSvcnetRules, load: nftRules(f)},
			dpRules{name: "svcnet nftables loaded, client to the Pod", load: nftRules(f), direct: true})
	}
	f, kubeProxy := dumps["kube-proxy"]
	if kubeProxy {
		rules = append(rules, dpRules{name: "kube-proxy nftables", load: nftRules(f)})
	}
	if kubeProxyHere {
		rules = append(rules, dpRules{name: "kube-proxy iptables", note: iptNote, load: iptablesRules(ipt)})
	}
	res.m = runDatapath(ctx, size, d, rules, *repeats)
	if !kubeProxy {
		res.m = append(res.m, dpRun{Services: size, Rules: "kube-proxy nftables", Err: "kube-proxy wrote no table at this size (n)"})
	}
	if !kubeProxyHere {
		res.m = append(res.m, dpRun{Services: size, Rules: "kube-proxy iptables",
			Err: fmt.Sprintf("kube-proxy is not run above %d Services (-scale-kube-proxy-max)", *scaleKubeProxyMax)})
	}
	return res, nil
}

// scaleRepeatProxies runs (n) -repeats times at one size, every
// proxy in turn in each repeat, so that a machine that slows down for a
// while slows every proxy alike. It adds a row per proxy to res and
// returns the tables the proxies wrote, by name, for (m).
func scaleRepeatProxies(ctx context.Context, root, dir string, w *agentWorld, size, scale int, res *scaleResults) (map[string]string, error) {
	impls := scaleImpls()
	rows := make([]scaleRow, len(impls))
	for i, impl := range impls {
		rows[i] = scaleRow{Services: size, Proxy: impl.name}
		if !strings.HasPrefix(impl.name, "svcnet") && *scaleKubeProxyMax > 0 && size*scale > *scaleKubeProxyMax {
			rows[i].NotRun = fmt.Sprintf("above %d Services (-scale-kube-proxy-max); see its cold sync at the sizes below", *scaleKubeProxyMax)
		}
	}
	dumps := map[string]string{}
	for repeat := range *repeats {
		for i, impl := range impls {
			if rows[i].NotRun != "" {
				continue
			}
			run, table, err := scaleOneProxy(ctx, root, dir, w, impl, size, scale, repeat)
			switch {
			case err != nil:
				return nil, err
			case run.err != "":
				rows[i].Errs = append(rows[i].Errs, run.err)
			default:
				rows[i].Runs = append(rows[i].Runs, run.res)
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
	progress("(n) %d Services with %s, run %d of %d\n", size, impl.name, repeat+1, *repeats)
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
			res.ColdSync.Round(time.Millisecond), ms(percentile(res.Latencies, 0.99)), res.CPU, res.RSSMiB)
	}
	if os.Getenv("SVCNET_BENCH_KEEP") != "" {
		progress("logs kept in %s\n", work)
	} else {
		os.RemoveAll(work)
	}
	return run, table, nil
}

const scaleTitle = "## Node agent at scale: svcnet agent vs kube-proxy, nftables mode (n)"

// renderScale writes (n) from its record alone.
func renderScale(rec *record[scaleData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(scaleTitle))
	fmt.Fprintf(&b, "As (h) and (i), at each size on a fresh API server: the proxy runs alone in its own node, the cold sync is "+
		"from process start until %s, then %d single endpoint changes, each measured "+
		"from the EndpointSlice write until a connection from the node reaches the new endpoint. Each proxy runs %d times at "+
		"each size, the proxies taking turns; a cell gives the median of the runs and, in brackets, the smallest and the "+
		"largest; the slowest change is of all the runs' changes. kube-proxy (%s) runs with --iptables-min-sync-period=0, the "+
		"svcnet agent's default, and at Go's default collector setting (GOGC=100): the agent's row at GOGC=100 is the one at the "+
		"same settings, and the ratios are its; the agent's own default is GOGC=50, in the row without a GOGC. CPU is the "+
		"process's user+system time for the whole run including the nft children it waited for; RSS its peak. %s\n\n",
		coldSyncEnd, d.Changes, d.Repeats, rec.Tools["kube-proxy"], rec.loadNote())
	b.WriteString("| Services x 10 endpoints | proxy | runs | cold sync (s) | change p50 (ms) | slowest change (ms) | CPU s | peak RSS MiB |\n" +
		"|---|---|---|---|---|---|---|---|\n")
	var sizes []int
	for _, r := range d.Rows {
		b.WriteString(scaleTableRow(r))
		if !slices.Contains(sizes, r.Services) {
			sizes = append(sizes, r.Services)
		}
	}
	for _, size := range sizes {
		if line := scaleRatioRow(d.Rows, size); line != "" {
			b.WriteString(line)
		}
	}
	writeScaleTargets(&b, d.Rows)
	return b.String()
}

// scaleTableRow is one proxy at one size in (n)'s table.
func scaleTableRow(r scaleRow) string {
	prefix := fmt.Sprintf("| %d | %s |", r.Services, r.Proxy)
	switch {
	case r.NotRun != "":
		return fmt.Sprintf("%s 0 | not run: %s | | | | |\n", prefix, r.NotRun)
	case len(r.Runs) == 0:
		return fmt.Sprintf("%s 0 of %d | did not finish: %s | | | | |\n", prefix, len(r.Errs), oneLine(r.Errs[0]))
	}
	runs := fmt.Sprintf("%d", len(r.Runs))
	if len(r.Errs) > 0 {
		runs = fmt.Sprintf("%d of %d (did not finish: %s)", len(r.Runs), len(r.Runs)+len(r.Errs), oneLine(r.Errs[0]))
	}
	var all []time.Duration
	for _, run := range r.Runs {
		all = append(all, run.Latencies...)
	}
	return fmt.Sprintf("%s %s | %s | %s | %.1f (of %d) | %s | %s |\n", prefix, runs,
		spreadOf(r.values(coldSyncSeconds), "%.3f"), spreadOf(r.values(changeMs(0.5)), "%.1f"), millis(slices.Max(all)), len(all),
		spreadOf(r.values(func(a agentResult) float64 { return a.CPU }), "%.2f"), spreadOf(r.values(peakRSS), "%.0f"))
}

// scaleRatioRow compares the agent with kube-proxy at one size, at the
// same settings: "" unless both ran there.
func scaleRatioRow(rows []scaleRow, size int) string {
	agent, ok1 := findScaleRow(rows, size, scaleSvcnetSameSettings)
	kp, ok2 := findScaleRow(rows, size, scaleKubeProxy)
	if !ok1 || !ok2 {
		return ""
	}
	m := func(r scaleRow, f func(agentResult) float64) float64 { return median(r.values(f)) }
	cpu := func(a agentResult) float64 { return a.CPU }
	return fmt.Sprintf("| %d | **svcnet GOGC=100 / kube-proxy** | | **%.2fx** | **%.2fx** | | **%.2fx** | **%.2fx** |\n", size,
		ratio(m(agent, coldSyncSeconds), m(kp, coldSyncSeconds)), ratio(m(agent, changeMs(0.5)), m(kp, changeMs(0.5))),
		ratio(m(agent, cpu), m(kp, cpu)), ratio(m(agent, peakRSS), m(kp, peakRSS)))
}

// findScaleRow is proxy's row at size, if it has finished runs.
func findScaleRow(rows []scaleRow, size int, proxy string) (scaleRow, bool) {
	i := slices.IndexFunc(rows, func(r scaleRow) bool { return r.Services == size && r.Proxy == proxy && len(r.Runs) > 0 })
	if i < 0 {
		return scaleRow{}, false
	}
	return rows[i], true
}

func oneLine(s string) string { return strings.ReplaceAll(firstLines(s, 1), "|", "/") }

// values are one figure of every finished run.
func (r scaleRow) values(of func(agentResult) float64) []float64 {
	out := make([]float64, len(r.Runs))
	for i, run := range r.Runs {
		out[i] = of(run)
	}
	return out
}

func coldSyncSeconds(a agentResult) float64 { return a.ColdSync.Seconds() }

func peakRSS(a agentResult) float64 { return a.RSSMiB }

// changeMs is a run's change latency at quantile q, in milliseconds (q 1:
// its slowest change).
func changeMs(q float64) func(agentResult) float64 {
	return func(a agentResult) float64 {
		if len(a.Latencies) == 0 {
			return math.NaN()
		}
		return float64(percentile(a.Latencies, q).Microseconds()) / 1000
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

// (n)'s targets, judged on the medians of the runs.
const (
	scaleTargetServices  = 50000
	scaleTargetColdSync  = 30 * time.Second
	scaleTargetChangeP99 = 20 * time.Millisecond
)

// writeScaleTargets judges (n)'s targets on the medians of the table
// above: the agent's peak RSS below kube-proxy's at the same settings
// wherever both ran, and at 50,000 Services, at its defaults, a cold
// sync under 30 s and one change under 20 ms p99.
func writeScaleTargets(b *strings.Builder, rows []scaleRow) {
	b.WriteString("\nTargets, judged on the medians above (met only if the median meets it):\n\n")
	for _, line := range scaleTargets(rows) {
		b.WriteString("- " + line + "\n")
	}
}

// scaleTargets are the lines writeScaleTargets writes.
func scaleTargets(rows []scaleRow) []string {
	var sizes []int
	for _, r := range rows {
		if !slices.Contains(sizes, r.Services) {
			sizes = append(sizes, r.Services)
		}
	}
	var rss []string
	for _, size := range sizes {
		agent, ok1 := findScaleRow(rows, size, scaleSvcnetSameSettings)
		kp, ok2 := findScaleRow(rows, size, scaleKubeProxy)
		if !ok1 || !ok2 {
			continue
		}
		a, k := median(agent.values(peakRSS)), median(kp.values(peakRSS))
		rss = append(rss, fmt.Sprintf("%d Services: %.0f against %.0f MiB, %s", size, a, k, verdict(a < k)))
	}
	var out []string
	if len(rss) == 0 {
		out = append(out, "Agent peak RSS below kube-proxy's at the same settings: not judged, no size ran both.")
	} else {
		out = append(out, "Agent peak RSS below kube-proxy's at the same settings (GOGC=100): "+strings.Join(rss, "; ")+".")
	}
	agent, ok := findScaleRow(rows, scaleTargetServices, scaleSvcnet)
	if !ok {
		return append(out, fmt.Sprintf("Cold sync under %s and one change under %s p99 at %d Services: not judged, the agent did not run at that size.",
			scaleTargetColdSync, scaleTargetChangeP99, scaleTargetServices))
	}
	c := median(agent.values(coldSyncSeconds))
	out = append(out, fmt.Sprintf("Cold sync at %d Services under %s, the agent at its defaults: %.1f s, %s.", scaleTargetServices,
		scaleTargetColdSync, c, verdict(c < scaleTargetColdSync.Seconds())))
	var all []time.Duration
	for _, run := range agent.Runs {
		all = append(all, run.Latencies...)
	}
	target := float64(scaleTargetChangeP99.Microseconds()) / 1000
	if len(all) >= 1000 {
		p99 := millis(percentile(all, 0.99))
		return append(out, fmt.Sprintf("One endpoint change at %d Services under %s p99: %.1f ms over %d changes, %s.", scaleTargetServices,
			scaleTargetChangeP99, p99, len(all), verdict(p99 < target)))
	}
	// Too few changes lie beyond a p99 to name one: the slowest of them
	// all is judged, a stricter test.
	slowest := millis(slices.Max(all))
	return append(out, fmt.Sprintf("One endpoint change at %d Services under %s p99, judged on the slowest of the %d changes (too few for a p99): %.1f ms, %s.",
		scaleTargetServices, scaleTargetChangeP99, len(all), slowest, verdict(slowest < target)))
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}
