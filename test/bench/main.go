// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command bench runs svcnet and the upstream component it replaces side by
// side on this machine and writes the results to docs/BENCHMARKS.md. It is
// what `make bench` runs; see that file for how to read the numbers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

func main() {
	out := flag.String("out", "docs/BENCHMARKS.md", "file to write the results to; - for standard output")
	scale := flag.Int("scale", 1, "divide every workload size by this (a quick smoke run: 10)")
	micro := flag.String("micro", "", "file with `go test -bench` output to include")
	only := flag.String("only", "", "run only the scenarios whose name starts with one of these letters, e.g. ab")
	fromRecords := flag.Bool("report", false, "run nothing: render the recorded sections from "+resultsDir+" alone into -out (make bench-report)")
	flag.Parse()
	if *fromRecords {
		writeReport(*out)
		return
	}
	if *dpRole != "" {
		runDatapathRole()
	}
	if *repeats < 1 {
		fmt.Fprintln(os.Stderr, "bench: -repeats must be at least 1")
		os.Exit(2)
	}
	if *scale < 1 {
		fmt.Fprintln(os.Stderr, "bench: -scale must be at least 1")
		os.Exit(2)
	}
	if _, err := regexp.Compile(*agentsOnly); err != nil {
		fmt.Fprintf(os.Stderr, "bench: -agents: %v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(logr.Discard())
	// The node agent benchmark builds network namespaces: the whole run
	// happens in a private network namespace, never on the host's own.
	skip := privatens.Enter().Unavailable()
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	var b strings.Builder
	writeHeader(&b, *scale)
	if err := runReports(context.Background(), &b, root, *scale, *only, skip, *out != "-"); err != nil {
		fail(err)
	}
	b.WriteString("\n## How to read the tables\n" + howToRead)
	if *micro != "" {
		m, err := os.ReadFile(*micro)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(&b, "\n## Micro-benchmarks (go test -bench)\n\n```\n%s```\n", m)
	}
	fmt.Fprintf(&b, "\n## Rerun\n\n```\nmake bench            # everything: this file and every record in %s\n"+
		"go run ./test/bench -scale 10 -out -   # a quick smoke run to standard output, recording nothing\n"+
		"go run ./test/bench -only k -out docs/BENCHMARKS.md   # only (k), replacing its section and its record\n"+
		"make build && go run ./test/bench -only jlp -out docs/BENCHMARKS.md   # (j), (l) and (p) run bin/: build it first\n"+
		"make bench-report     # the recorded sections again from %s alone: this file, unchanged\n```\n", resultsDir, resultsDir)
	// A partial run replaces the sections it wrote and keeps the others,
	// so the file stays whole and regenerable section by section.
	writeDocument(root, *out, b.String(), *only != "" || *micro == "")
}

// writeDocument writes text to out (merged into out's sections when
// merge is set) and the recorded sections' figures beside it; to
// standard output alone when out is "-".
func writeDocument(root, out, text string, merge bool) {
	if out == "-" {
		fmt.Print(text)
		return
	}
	if old, err := os.ReadFile(out); err == nil && merge {
		text = mergeSections(string(old), text)
	}
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		fail(err)
	}
	if err := writeFigures(root); err != nil {
		fail(err)
	}
	fmt.Fprintln(os.Stderr, "bench: wrote", out)
}

// writeReport renders the recorded sections into out, keeping the rest
// of the document.
func writeReport(out string) {
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	text, err := report(root)
	if err != nil {
		fail(err)
	}
	if _, err := os.Stat(out); err != nil && out != "-" {
		// The rest of the document is the file's own: there must be one.
		fail(err)
	}
	writeDocument(root, out, docHeader+text, true)
}

func writeHeader(b *strings.Builder, scale int) {
	b.WriteString(docHeader)
	if scale > 1 {
		fmt.Fprintf(b, "**Smoke run: workloads divided by %d.**\n\n", scale)
	}
}

// docHeader opens the document whatever ran: each recorded section says
// when, at which commit and on what machine it ran.
const docHeader = "# Benchmarks\n\nWritten by `make bench` (`go run ./test/bench`), one section or all of them at a time. Every comparison " +
	"runs svcnet and the upstream component of Kubernetes (built from Go modules into bin/k8s) one after the other on the same " +
	"machine in the same run. A section with a record in " + resultsDir + " opens with when, at which commit and on what machine " +
	"it ran, and `make bench-report` renders it again from that record alone. A section without one is as its last run wrote it, " +
	"on a 2-core machine shared with other work. Compare ratios, and rerun before drawing conclusions from small differences.\n\n"

// runReports runs the scenarios -only selects, each section after the
// other; skip says why the ones that need network namespaces cannot run,
// and keep whether recorded sections keep their records in resultsDir.
func runReports(ctx context.Context, b *strings.Builder, root string, scale int, only, skip string, keep bool) error {
	if selected(only, "abcd") {
		es, err := esReport(ctx, root, scale, only, keep)
		if err != nil {
			return err
		}
		b.WriteString(es)
	}
	if selected(only, "ef") {
		adm, err := admissionReport(ctx, root, scale, only, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + adm)
	}
	ag, err := agentReport(ctx, root, scale, only, skip, keep)
	if err != nil {
		return err
	}
	if ag != "" {
		b.WriteString("\n" + ag)
	}
	if selected(only, "k") {
		floor, err := nftFloorReport(ctx, root, scale, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + floor)
	}
	if selected(only, "mn") {
		sc, err := scaleReport(ctx, root, scale, only, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + sc)
	}
	if selected(only, "o") {
		ann, err := annTableIPv4.report(ctx, root, scale, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + ann)
	}
	if selected(only, "q") {
		ann6, err := annTableIPv6.report(ctx, root, scale, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + ann6)
	}
	if selected(only, "p") {
		mg, err := migrationReport(ctx, root, scale, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + mg)
	}
	if selected(only, "jl") {
		pl, err := pipelineReport(ctx, root, scale, skip, keep)
		if err != nil {
			return err
		}
		b.WriteString("\n" + pl)
	}
	return nil
}

// howToRead explains the tables and their targets.
const howToRead = `
How to read the EndpointSlice table: targets are (c) writes at most 0.7x upstream's, at most ceil(150/100)+1 = 3 slices
after (d), and time and CPU in (a) and (b) at most 1.0x. The times of (a) and (b) are process start, cache sync and the
writes: svcnet starts its workers the moment its informers and handlers are synced (client-go's sync channels, not
controller-runtime's 100 ms polls) and sends a large sync's writes 8 at a time; (b)'s 500 creates are paced by the shared
client rate limit (QPS 100, burst 200: at least 3 s) for both. (d)'s time is mostly the benchmark deleting 850 Pods (no
target). The ranges beside each median show how far the runs moved: a ratio whose sides' ranges overlap is not a difference.

How to read the node agent table: targets are a change p99 of at most 100 ms at 1,000 Services (g), a cold sync of at most
0.5x kube-proxy's (h) and one change at 10,000 Services within 50 ms (i). A change's time includes the API server's write and
watch delivery. The micro-benchmark BenchmarkIncrementalSync10kServices below isolates the agent's own work for (i) before
iptables-restore runs. In nftables mode the targets are a change p99 of at most 50 ms at 1,000 Services (g) and at 10,000
(i, stretch 20 ms), and a cold sync of at most 0.3x kube-proxy's nftables mode (h), with less CPU and memory; the kernel's
floor table (k) shows what the same transactions cost bare, without the API server and the agent. The change targets are
the agent's at its defaults; the comparisons are at the same settings, the agent at Go's collector default beside kube-proxy,
both with no minimum sync period. A p99 is named only where at least ten changes lie beyond it; otherwise a target is judged
on the slowest change, which is stricter.

How to read the end-to-end table (j): targets are at most 250 ms from the scale request to every node reprogrammed and at most
0.5x the upstream pipeline's, judged on the slowest of the runs where too few runs lie beyond a p99 to name one. The clusters
share everything but the EndpointSlice controller, the allocators and the node proxy, and the step table shows where each
spends a scale-up's time: the first four steps run the same code in every cluster. A node proxy with a minimum sync period
applies a change at once when its last sync is older than the period, and otherwise waits it out: a lone scale-up on a quiet
cluster (j2) goes at once; a Service's create (j1) is two changes milliseconds apart (the Service, then its EndpointSlice),
and back to back (j3) the changes come faster than the period, so the second waits. kube-proxy's one-second default applies
to both sides of the ratio rows; svcnet's own defaults (no minimum) are the third kind of cluster, without a ratio.

How to read the cluster DNS table (l): the target is a name that answers within (j1)'s programming time plus CoreDNS's own
watch delay. Both pipelines put the ClusterIP in the create request itself (svcnet's webhook, kube-apiserver's allocator), so
a ClusterIP Service's name waits only for the create and CoreDNS's watch; a headless Service's name waits for its
EndpointSlice as well. A person's first curl to my-service, name then rules, waits for whichever comes last. (l3) is CoreDNS
answering from its cache through a node's UDP rules, the same path in every cluster.

The allocation benchmark measures the whole path a user waits for: with svcnet, kube-apiserver calls the webhook over TLS
and then commits what it chose, so each create does strictly more work than kube-apiserver alone; the targets are a
throughput ratio of at least 0.9 and a webhook p99 of at most 2 ms. The allocator micro-benchmarks below
(BenchmarkAllocate in allocator/ipam and allocator/portrange) show that choosing costs the same at 0%, 50% and 99.9% occupancy.
`

// repeats is how many times each side runs each scenario, the sides
// taking turns: every figure is then a median with its range.
var repeats = flag.Int("repeats", 3, "times each side runs each scenario, the sides taking turns (a smoke run: 1)")

// selected reports whether -only lets any of the scenario letters run.
func selected(only, letters string) bool {
	return only == "" || strings.ContainsAny(only, letters)
}

func cpuModel() string {
	out, err := exec.Command("sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").Output()
	if err != nil {
		return runtime.GOARCH
	}
	return strings.TrimSpace(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// progress logs a step of the run with the time of day, so that a long
// run's log shows where its time went.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: "+format, append([]any{time.Now().Format(time.TimeOnly)}, args...)...)
}
