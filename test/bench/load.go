// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// loadSampler records the machine's 1-minute load average every 10 s
// while a long benchmark runs: on a shared machine, what else ran is part
// of reading the numbers.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	done    chan struct{}
	once    sync.Once
	start   time.Time
}

func newLoadSampler() *loadSampler {
	s := &loadSampler{done: make(chan struct{}), start: time.Now()}
	go func() {
		t := time.NewTicker(loadEvery)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *loadSampler) sample() {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.samples = append(s.samples, v)
	s.mu.Unlock()
}

// finish ends the sampling, once however often it is called, and
// returns the samples: the records of one run share one sampler.
func (s *loadSampler) finish() []float64 {
	s.once.Do(func() { close(s.done) })
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// describeLoad is the sentence on the load of a run that took took, ""
// without samples.
func describeLoad(samples []float64, took time.Duration, cores int) string {
	if len(samples) == 0 {
		return ""
	}
	sorted := slices.Sorted(slices.Values(samples))
	return fmt.Sprintf("The machine's 1-minute load average during these %s (sampled every %s; %d cores, shared with other work): "+
		"min %.1f, median %.1f, max %.1f.", took.Round(time.Minute), fmtSeconds(loadEvery), cores, sorted[0], sorted[len(sorted)/2], sorted[len(sorted)-1])
}

// loadEvery is how often the load is sampled.
const loadEvery = 10 * time.Second

// fmtSeconds writes whole seconds as "10 s".
func fmtSeconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int(d.Seconds()))
}

// section is one "## " section of BENCHMARKS.md: its heading line and
// everything up to the next heading.
type section struct {
	title, text string
}

// splitSections cuts a document into what comes before its first "## "
// heading and its sections.
func splitSections(doc string) (string, []section) {
	lines := strings.SplitAfter(doc, "\n")
	var head strings.Builder
	var out []section
	for _, line := range lines {
		if strings.HasPrefix(line, "## ") {
			out = append(out, section{title: strings.TrimSpace(line)})
		}
		if len(out) == 0 {
			head.WriteString(line)
			continue
		}
		out[len(out)-1].text += line
	}
	return head.String(), out
}

// mergeSections is old with each section that fresh also has replaced by
// fresh's, and fresh's other sections added before "How to read the
// tables" (or at the end); the header is fresh's.
func mergeSections(old, fresh string) string {
	head, oldSections := splitSections(old)
	freshHead, freshSections := splitSections(fresh)
	if freshHead != "" {
		// A partial run's sections follow the header after a blank
		// line of their own; the header ends with its own.
		head = strings.TrimRight(freshHead, "\n") + "\n\n"
	}
	byTitle := map[string]section{}
	for _, s := range freshSections {
		byTitle[s.title] = s
	}
	var out []section
	used := map[string]bool{}
	for _, s := range oldSections {
		if f, ok := byTitle[s.title]; ok {
			s = f
			used[s.title] = true
		}
		out = append(out, s)
	}
	at := slices.IndexFunc(out, func(s section) bool { return s.title == "## How to read the tables" })
	if at < 0 {
		at = len(out)
	}
	for _, s := range freshSections {
		if !used[s.title] {
			out = slices.Insert(out, at, s)
			at++
		}
	}
	var b strings.Builder
	b.WriteString(head)
	for _, s := range out {
		if !strings.HasSuffix(b.String(), "\n\n") {
			b.WriteString("\n")
		}
		b.WriteString(s.text)
	}
	return b.String()
}
