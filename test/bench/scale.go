// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
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

// scaleChanges is the number of single endpoint changes per size.
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

// scaleImpls are the proxies of (n): svcnet's agent, and kube-proxy's
// nftables mode with no minimum sync period (its best case for a change).
func scaleImpls() []agentImpl {
	var out []agentImpl
	for _, impl := range agentImpls() {
		if impl.name == "svcnet agent --mode=nftables" || impl.name == "kube-proxy --proxy-mode=nftables --iptables-min-sync-period=0" {
			out = append(out, impl)
		}
	}
	return out
}

type scaleRow struct {
	services int
	impl     string
	res      agentResult
	err      string
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
	dumps := map[string]string{}
	for _, impl := range scaleImpls() {
		if !strings.HasPrefix(impl.name, "svcnet") && *scaleKubeProxyMax > 0 && size*scale > *scaleKubeProxyMax {
			res.n = append(res.n, scaleRow{services: size, impl: impl.name,
				notRun: fmt.Sprintf("above %d Services (-scale-kube-proxy-max); see its cold sync at the sizes below", *scaleKubeProxyMax)})
			continue
		}
		row, table, err := scaleOneProxy(ctx, root, dir, w, impl, size, scale)
		if err != nil {
			w.close()
			return res, err
		}
		if row.err == "" {
			dumps[table] = datapathFile(dir, table+".nft", size)
		}
		res.n = append(res.n, row)
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

// scaleOneProxy is (n) for one proxy at one size: its row (with the
// failure in row.err) and the name of the table it wrote, dumped into
// dir for (m).
func scaleOneProxy(ctx context.Context, root, dir string, w *agentWorld, impl agentImpl, size, scale int) (scaleRow, string, error) {
	table := "kube-proxy"
	if strings.HasPrefix(impl.name, "svcnet") {
		table = "svcnet"
	}
	progress("(n) %d Services with %s\n", size, impl.name)
	work, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return scaleRow{}, table, err
	}
	sc := agentScenario{letter: 'n', services: size, changes: scaleChanges / min(scale, scaleChanges), gap: 1200 * time.Millisecond}
	res, err := runAgent(ctx, root, work, w, impl, sc, dumpTable(w, table, datapathFile(dir, table+".nft", size)))
	row := scaleRow{services: size, impl: impl.name, res: res}
	if err != nil {
		row.err = err.Error()
		progress("(n) %d Services, %s: %v\n", size, impl.name, err)
	}
	if os.Getenv("SVCNET_BENCH_KEEP") != "" {
		progress("logs kept in %s\n", work)
	} else {
		os.RemoveAll(work)
	}
	return row, table, nil
}

func writeScaleSection(b *strings.Builder, rows []scaleRow, loadNote string) {
	b.WriteString("## Node agent at scale: svcnet agent vs kube-proxy, nftables mode (n)\n\n")
	fmt.Fprintf(b, "As (h) and (i), at each size on a fresh API server: the proxy runs alone in its own node, the cold sync is "+
		"from process start until %s, then %d single endpoint changes, each measured "+
		"from the EndpointSlice write until a connection from the node reaches the new endpoint. kube-proxy runs with "+
		"--iptables-min-sync-period=0, its best case for a change. CPU is the process's user+system time for the whole run "+
		"including the nft children it waited for; RSS its peak. %s\n\n", coldSyncEnd, scaleChanges, loadNote)
	b.WriteString("| Services x 10 endpoints | proxy | cold sync | change p50 | change p99 | change max | CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		if r.notRun != "" {
			fmt.Fprintf(b, "| %d | %s | not run: %s | | | | | |\n", r.services, r.impl, r.notRun)
			continue
		}
		if r.err != "" {
			fmt.Fprintf(b, "| %d | %s | did not finish: %s | | | | | |\n", r.services, r.impl, strings.ReplaceAll(firstLines(r.err, 1), "|", "/"))
			continue
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %.2f | %.0f |\n", r.services, r.impl, r.res.coldSync.Round(time.Millisecond),
			ms(percentile(r.res.latencies, 0.5)), ms(percentile(r.res.latencies, 0.99)), ms(slices.Max(r.res.latencies)), r.res.cpu, r.res.rssMiB)
	}
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
