// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot/vg"
)

// TestRecordedSectionsAreTheDocument renders every recorded section from
// test/bench/results alone and finds it, byte for byte, in
// docs/BENCHMARKS.md: neither the document nor the renderer can drift
// from the records without `make bench-report` showing it.
func TestRecordedSectionsAreTheDocument(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	head, sections := splitSections(string(doc))
	if head != docHeader {
		t.Errorf("docs/BENCHMARKS.md's header is not docHeader; run make bench-report:\n%s", cmp.Diff(docHeader, head))
	}
	inDoc := map[string]string{}
	for _, s := range sections {
		inDoc[s.title] = s.text
	}
	for _, s := range recordedSections {
		text, err := s.render(root)
		if err != nil {
			t.Errorf("(%s): %v", s.letter, err)
			continue
		}
		if text == "" {
			continue
		}
		// A record may render more than one section, (j) and (l) one each.
		_, rendered := splitSections(text)
		for _, r := range rendered {
			got, ok := inDoc[r.title]
			if !ok {
				t.Errorf("(%s): %s has a record but no section %q: run make bench-report", s.letter, resultsDir, r.title)
				continue
			}
			// A section's text in the document ends where the next
			// begins: the blank line between them is the document's.
			if want, have := strings.TrimRight(r.text, "\n"), strings.TrimRight(got, "\n"); want != have {
				t.Errorf("(%s): docs/BENCHMARKS.md differs from its record (-rendered +document); run make bench-report:\n%s", s.letter, cmp.Diff(want, have))
			}
		}
		if s.figures == nil {
			continue
		}
		figs, err := s.figures(root)
		if err != nil {
			t.Errorf("(%s): %v", s.letter, err)
		}
		for _, f := range figs {
			if have, err := os.ReadFile(filepath.Join(root, figuresDir, f.name)); err != nil || !bytes.Equal(have, f.svg) {
				t.Errorf("(%s): %s is not what its record draws (%v); run make bench-report", s.letter, filepath.Join(figuresDir, f.name), err)
			}
		}
	}
}

// TestRecordRoundTrip saves a record and renders it loaded again: the
// same text, and each list of samples on one line of the file.
func TestRecordRoundTrip(t *testing.T) {
	root := t.TempDir()
	rec := newRecord[annData](root, "q")
	rec.Tools["metallb"] = "v0.16.1"
	rec.Took = 61 * time.Minute
	rec.Load = []float64{0.5, 1.25, 2}
	rec.Data = annData{Settings: annSettingsFor(annIPv6, 1), Rows: []annResult{
		{Name: "svcnet, L2, link cut", Took: []time.Duration{511 * time.Millisecond, 498 * time.Millisecond, 530 * time.Millisecond},
			Outages: []time.Duration{511 * time.Millisecond, 498 * time.Millisecond, 530 * time.Millisecond}, Rounds: 900, Doubles: 1},
		{Name: "svcnet, BGP, announcer SIGKILL", Took: []time.Duration{0, 0}, Outages: []time.Duration{20 * time.Millisecond, 30 * time.Millisecond}},
		{Name: "MetalLB, BGP (FRR mode), link cut", NotMeasured: "the cluster never settled"},
	}}
	if err := rec.save(root); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(resultsFile(root, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"took": [511000000,498000000,530000000]`) {
		t.Errorf("samples not on one line:\n%s", b)
	}
	back, err := loadRecord[annData](root, "q")
	if err != nil {
		t.Fatal(err)
	}
	want := annTableIPv6.render(rec)
	if diff := cmp.Diff(want, annTableIPv6.render(back)); diff != "" {
		t.Errorf("rendered from the file (-saved +loaded):\n%s", diff)
	}
	hasAll(t, want,
		"| (q) svcnet, L2, link cut | 511 ms | 498-530 ms of 3 | 511 ms | 498-530 ms of 3 | 0 of 3 | 1 of 900 questions |",
		"| (q) svcnet, BGP, announcer SIGKILL | nothing moves (the routes stay) | | 25 ms | 20-30 ms of 2 | 0 of 2 | - |",
		"| (q) MetalLB, BGP (FRR mode), link cut | not measured: the cluster never settled |",
		"during these 1h1m0s (sampled every 10 s; ",
		"min 0.5, median 1.2, max 2.0.",
		"hold time 3 s, BFD 300 ms x 3",
	)
}

func TestLoadRecordRefusesUnknownFields(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, resultsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resultsFile(root, "q"), []byte(`{"section":"q","typo":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRecord[annData](root, "q"); err == nil || !strings.Contains(err.Error(), "typo") {
		t.Errorf("loadRecord = %v, want an error naming the unknown field", err)
	}
	if rec, err := loadRecord[annData](root, "o"); rec != nil || err != nil {
		t.Errorf("a section without a record: %v, %v; want nil, nil", rec, err)
	}
}

// TestAdmissionRendering: medians with their ranges over interleaved
// runs, the ratio of the medians, and no p99 named from fewer than ten
// creates beyond it.
func TestAdmissionRendering(t *testing.T) {
	run := func(svcnet bool, wall time.Duration, creates int) admRun {
		r := admRun{Svcnet: svcnet, Wall: wall, Creates: creates, ClientP50: 10 * time.Millisecond, ClientP99: 40 * time.Millisecond}
		if svcnet {
			r.WebhookP50, r.WebhookP99, r.CPU, r.RSSMiB = 60*time.Microsecond, 300*time.Microsecond, 2.5, 63
		}
		return r
	}
	rec := &record[admData]{Section: "ef", Recorded: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), Took: 5 * time.Minute, Commit: "abc",
		Tools: map[string]string{"kube-apiserver": "v1.37.1"}, Data: admData{Workers: 32, Repeats: 3, Scenarios: []admScenarioRuns{
			{Name: "(e) create 5000 ClusterIP Services", Services: 5000, Runs: []admRun{
				run(false, 20*time.Second, 5000), run(true, 10*time.Second, 5000), run(false, 25*time.Second, 5000),
				run(true, 12500*time.Millisecond, 5000), run(false, 10*time.Second, 5000), run(true, 20*time.Second, 5000)}},
			{Name: "(f) create 200 NodePort Services", Services: 200, Runs: []admRun{run(false, time.Second, 200), run(true, time.Second, 200)}},
		}}}
	got := renderAdmission(rec)
	hasAll(t, got,
		"| (e) create 5000 ClusterIP Services | kube-apiserver alone | 250 (200-500) | 10.0 (10.0-10.0) | 40.0 (40.0-40.0) | - | - | - | - |",
		"| (e) create 5000 ClusterIP Services | svcnet | 400 (250-500) | 10.0 (10.0-10.0) | 40.0 (40.0-40.0) | 0.06 (0.06-0.06) | 0.30 (0.30-0.30) | 2.50 (2.50-2.50) | 63 (63-63) |",
		"| (e) create 5000 ClusterIP Services | **svcnet/alone** | **1.60x** |",
		"| (f) create 200 NodePort Services | kube-apiserver alone | 200 | 10.0 | - (200 creates) |",
		"Each side runs 3 times, the sides alternating",
	)
}

// TestESRendering: each controller's runs apart, medians with ranges,
// ratios of the medians.
func TestESRendering(t *testing.T) {
	run := func(c string, converge time.Duration, writes int64) esRun {
		return esRun{Controller: c, Converge: converge, Writes: writes, Slices: 50, Endpoints: 5000, CPU: 0.3, RSSMiB: 80}
	}
	rec := &record[esData]{Section: "abcd", Recorded: time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), Took: 9 * time.Minute, Commit: "abc",
		Tools: map[string]string{"kube-controller-manager": "v1.37.1"}, Data: esData{QPS: "100", Burst: "200", BatchPeriod: "0s", Nodes: 10,
			Repeats: 3, Scenarios: []esScenarioRuns{{Name: "(a) 1 Service x 5000 Pods", Runs: []esRun{
				run("svcnet", 400*time.Millisecond, 50), run("kube-controller-manager", 800*time.Millisecond, 50),
				run("svcnet", 300*time.Millisecond, 50), run("kube-controller-manager", 600*time.Millisecond, 60),
				run("svcnet", 500*time.Millisecond, 50), run("kube-controller-manager", 700*time.Millisecond, 50)}}}}}
	got := renderES(rec)
	hasAll(t, got,
		"| (a) 1 Service x 5000 Pods | svcnet | 0.400 (0.300-0.500) | 50 (50-50) | 50 (50-50) | 100.0 (100.0-100.0) | 0.30 (0.30-0.30) | 80 (80-80) |",
		"| (a) 1 Service x 5000 Pods | kube-controller-manager | 0.700 (0.600-0.800) | 50 (50-60) |",
		"| (a) 1 Service x 5000 Pods | **svcnet/upstream** | **0.57x** | **1.00x** | 50 vs 50 | | **1.00x** | **1.00x** |",
	)
}

// TestFailoverFigure: the chart is drawn the same twice from one record,
// names the rows that moved and leaves out those that did not.
func TestFailoverFigure(t *testing.T) {
	rec := &record[annData]{Data: annData{Rows: []annResult{
		{Name: "svcnet, L2, link cut", Took: []time.Duration{511 * time.Millisecond, 498 * time.Millisecond, 530 * time.Millisecond}},
		{Name: "MetalLB, L2, link cut", Took: []time.Duration{5 * time.Second, 6 * time.Second, 7 * time.Second}},
		{Name: "svcnet, BGP, announcer SIGKILL", Took: []time.Duration{0, 0}},
		{Name: "MetalLB, BGP, link cut", NotMeasured: "no"},
	}}}
	a, err := annTableIPv6.figures(rec)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := annTableIPv6.figures(rec)
	if len(a) != 1 || len(b) != 1 || !bytes.Equal(a[0].svg, b[0].svg) {
		t.Fatalf("two draws of one record differ")
	}
	svg := string(a[0].svg)
	hasAll(t, svg, "svcnet, L2, link cut", "MetalLB, L2, link cut", "<svg")
	if strings.Contains(svg, "announcer SIGKILL") || strings.Contains(svg, "MetalLB, BGP") {
		t.Errorf("the chart shows a row that did not move")
	}
	if out := os.Getenv("SVCNET_BENCH_FIGURE"); out != "" {
		// To look at: the same chart as PNG.
		p, err := annTableIPv6.failoverPlot(charted(rec.Data.Rows))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Save(9*vg.Inch, 2*vg.Inch, out); err != nil {
			t.Fatal(err)
		}
	}
}

// hasAll fails t for each of wants that text lacks.
func hasAll(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("the text lacks %q:\n%s", want, text)
		}
	}
}

// TestMergeSections: a partial run replaces its own sections in place,
// adds a new one before "How to read the tables", keeps the others, and
// leaves the header as docHeader whatever blank line its sections
// started with.
func TestMergeSections(t *testing.T) {
	old := docHeader + "## A\n\na\n\n## B\n\nold b\n\n## How to read the tables\n\nx\n"
	fresh := docHeader + "\n## B\n\nnew b\n\n## C\n\nc\n"
	want := docHeader + "## A\n\na\n\n## B\n\nnew b\n\n## C\n\nc\n\n## How to read the tables\n\nx\n"
	if got := mergeSections(old, fresh); got != want {
		t.Errorf("merged (-want +got):\n%s", cmp.Diff(want, got))
	}
}
