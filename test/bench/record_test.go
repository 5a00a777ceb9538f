// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	_, sections := splitSections(string(doc))
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
		title := strings.TrimSpace(strings.SplitN(text, "\n", 2)[0])
		got, ok := inDoc[title]
		if !ok {
			t.Errorf("(%s): %s has a record but no section %q: run make bench-report", s.letter, resultsDir, title)
			continue
		}
		// A section's text in the document ends where the next begins:
		// the blank line between them is the document's.
		if want, have := strings.TrimRight(text, "\n"), strings.TrimRight(got, "\n"); want != have {
			t.Errorf("(%s): docs/BENCHMARKS.md differs from its record (-rendered +document); run make bench-report:\n%s", s.letter, cmp.Diff(want, have))
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
	for _, s := range []string{
		"| (q) svcnet, L2, link cut | 511 ms | 498-530 ms of 3 | 511 ms | 498-530 ms of 3 | 0 of 3 | 1 of 900 questions |",
		"| (q) svcnet, BGP, announcer SIGKILL | nothing moves (the routes stay) | | 25 ms | 20-30 ms of 2 | 0 of 2 | - |",
		"| (q) MetalLB, BGP (FRR mode), link cut | not measured: the cluster never settled |",
		"during these 1h1m0s (sampled every 10 s; ",
		"min 0.5, median 1.2, max 2.0.",
		"hold time 3 s, BFD 300 ms x 3",
	} {
		if !strings.Contains(want, s) {
			t.Errorf("rendered text lacks %q:\n%s", s, want)
		}
	}
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
