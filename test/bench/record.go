// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Recorded sections: a section measured by a run is kept as a record (the
// machine, the commit, the tools, the load and the raw samples) in
// resultsDir, and its text in BENCHMARKS.md is rendered from that record
// alone, by the same function whether the run has just ended or
// `make bench-report` renders it again later. A section not yet recorded
// this way keeps the text its last run wrote.
const resultsDir = "test/bench/results"

// record is one recorded run of a section; Data holds its samples and
// its settings, in the section's own form.
type record[T any] struct {
	Section  string    `json:"section"`
	Recorded time.Time `json:"recorded"`
	// Took is the run's wall time.
	Took time.Duration `json:"took"`
	// Commit is the code that ran: HEAD, "-dirty" if the tracked files
	// differed from it.
	Commit  string            `json:"commit"`
	Machine machine           `json:"machine"`
	Tools   map[string]string `json:"tools,omitempty"`
	// Load is the machine's 1-minute load average, every loadEvery.
	Load []float64 `json:"load"`
	Data T         `json:"data"`
}

type machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
}

// newRecord starts the record of a run of section that begins now.
func newRecord[T any](root, section string) *record[T] {
	return &record[T]{Section: section, Recorded: time.Now().UTC().Truncate(time.Second), Commit: commitOf(root),
		Machine: machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Kernel: kernelRelease(), Go: runtime.Version()},
		Tools:   map[string]string{}}
}

// close ends the record with the run's load and samples, keeps it in
// resultsDir when keep is set, and renders it.
func (r *record[T]) close(root string, load *loadSampler, data T, keep bool, render func(*record[T]) string) (string, error) {
	r.Took = time.Since(r.Recorded).Truncate(time.Second)
	r.Load = load.finish()
	r.Data = data
	if keep {
		if err := r.save(root); err != nil {
			return "", err
		}
	}
	return render(r), nil
}

// provenance is the sentence that opens a recorded section: when, at
// which commit, how long and on what the run ran, how to run it again
// and where its record is.
func (r *record[T]) provenance() string {
	m := r.Machine
	rerun := "go run ./test/bench -only " + r.Section
	if runsBin[r.Section] {
		rerun = "make build && " + rerun
	}
	return fmt.Sprintf("Recorded on %s at %s in %s on %s (%d cores, Linux %s, %s): `%s`; the record: %s.",
		r.Recorded.Format("2006-01-02"), r.Commit, r.Took, m.CPU, m.Cores, m.Kernel, m.Go, rerun, filepath.ToSlash(filepath.Join(resultsDir, r.Section+".json")))
}

// runsBin are the sections whose runs start the programs of bin/, which
// `make build` builds.
var runsBin = map[string]bool{"p": true, "jl": true}

// heading opens a recorded section: its title and its provenance.
func (r *record[T]) heading(title string) string {
	return title + "\n\n" + r.provenance() + "\n\n"
}

// loadNote describes the load the record saw, "" if none was sampled.
func (r *record[T]) loadNote() string {
	return describeLoad(r.Load, r.Took, r.Machine.Cores)
}

// resultsFile is where section's record is kept.
func resultsFile(root, section string) string {
	return filepath.Join(root, resultsDir, section+".json")
}

// save writes the record to resultsDir, indented, each list of samples
// on a line.
func (r *record[T]) save(root string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, resultsDir), 0o755); err != nil {
		return err
	}
	return os.WriteFile(resultsFile(root, r.Section), append(compactNumbers(b), '\n'), 0o644)
}

// loadRecord reads section's record; nil and no error if there is none.
func loadRecord[T any](root, section string) (*record[T], error) {
	b, err := os.ReadFile(resultsFile(root, section))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record[T]
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", resultsFile(root, section), err)
	}
	return &r, nil
}

// numberList is a JSON list of numbers, as MarshalIndent spreads it.
var numberList = regexp.MustCompile(`\[\s*-?[0-9][0-9.e+-]*(?:,\s*-?[0-9][0-9.e+-]*)*\s*\]`)

// compactNumbers puts each list of numbers of an indented JSON document
// on one line: a record's samples stay short, its rows one a line.
func compactNumbers(b []byte) []byte {
	return numberList.ReplaceAllFunc(b, func(l []byte) []byte {
		return []byte(strings.Join(strings.Fields(string(l)), ""))
	})
}

// commitOf is the commit root's tracked files are at, "-dirty" when they
// differ from it: its code, that is, not the results, the documents and
// figures a run writes or an engineer edits meanwhile.
func commitOf(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".",
		":!"+resultsDir, ":!docs", ":!*.md").Output()
	if err != nil || len(bytes.TrimSpace(st)) > 0 {
		commit += "-dirty"
	}
	return commit
}

// toolVersion is what a binary says with --version, its last word:
// "Kubernetes v1.37.1" gives v1.37.1.
func toolVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) > 0 {
		return f[len(f)-1]
	}
	return "version unknown"
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// recordedSection renders a section from its record, "" when it has
// none yet.
type recordedSection struct {
	letter string
	render func(root string) (string, error)
	// figures draws the section's charts from its record, if it has any.
	figures func(root string) ([]figure, error)
}

// recordedSections are the sections BENCHMARKS.md takes from resultsDir.
var recordedSections = []recordedSection{
	recorded("abcd", renderES, nil),
	recorded("ef", renderAdmission, nil),
	recorded("ghi", renderAgent, nil),
	recorded("k", renderFloor, nil),
	recorded("jl", renderPipeline, nil),
	recorded("n", renderScale, nil),
	recorded("m", renderDatapath, nil),
	recorded("o", annTableIPv4.render, annTableIPv4.figures),
	recorded("p", renderMigration, nil),
	recorded("q", annTableIPv6.render, annTableIPv6.figures),
}

// recorded is the section whose record in root is render's and, if
// draw is set, draw's; each renders or draws nothing while the section
// has no record.
func recorded[T any](letter string, render func(*record[T]) string, draw func(*record[T]) ([]figure, error)) recordedSection {
	s := recordedSection{letter: letter, render: func(root string) (string, error) {
		rec, err := loadRecord[T](root, letter)
		if err != nil || rec == nil {
			return "", err
		}
		return render(rec), nil
	}}
	if draw != nil {
		s.figures = func(root string) ([]figure, error) {
			rec, err := loadRecord[T](root, letter)
			if err != nil || rec == nil {
				return nil, err
			}
			return draw(rec)
		}
	}
	return s
}

// report renders every recorded section from resultsDir alone, in the
// order of recordedSections: what `make bench-report` merges into the
// document.
func report(root string) (string, error) {
	var b strings.Builder
	for _, s := range recordedSections {
		text, err := s.render(root)
		if err != nil {
			return "", fmt.Errorf("section (%s): %w", s.letter, err)
		}
		if text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(text)
	}
	return b.String(), nil
}
