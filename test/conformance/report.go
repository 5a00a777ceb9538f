// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ginkgoReport is the part of ginkgo's JSON report (--json-report, a list
// of these) that this program reads. Ginkgo's own types are not imported:
// the e2e module pins another ginkgo than svcnet's go.mod.
type ginkgoReport struct {
	SuiteDescription           string
	SuiteSucceeded             bool
	SpecialSuiteFailureReasons []string
	SpecReports                []specReport
}

type specReport struct {
	ContainerHierarchyTexts    []string
	LeafNodeType               string
	LeafNodeText               string
	LeafNodeLocation           codeLocation
	State                      string
	RunTime                    time.Duration
	Failure                    *specFailure
	CapturedGinkgoWriterOutput string
	SpecEvents                 []specEvent
}

// specEvent is an entry of the spec's timeline: By steps, nodes.
type specEvent struct {
	Message string
}

type specFailure struct {
	Message        string
	ForwardedPanic string
	Location       codeLocation
}

type codeLocation struct {
	FileName   string
	LineNumber int
}

// fullText is the spec's name as ginkgo's focus sees it.
func (s specReport) fullText() string {
	return strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " ")
}

// namespaceRE finds the namespaces the framework made for a test in the
// step that deletes them.
var namespaceRE = regexp.MustCompile(`Destroying namespace "([^"]+)"`)

// namespaces are the namespaces the framework made for the test.
func (s specReport) namespaces() []string {
	var out []string
	for _, e := range s.SpecEvents {
		for _, m := range namespaceRE.FindAllStringSubmatch(e.Message, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// readGinkgoReport reads ginkgo's JSON report; a missing report is an
// error (ginkgo did not get to the end).
func readGinkgoReport(path string) ([]ginkgoReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading ginkgo's report: %w", err)
	}
	var reports []ginkgoReport
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("reading ginkgo's report %s: %w", path, err)
	}
	return reports, nil
}

// Results of one test.
const (
	resultPassed  = "passed"
	resultFailed  = "failed"
	resultSkipped = "skipped"
	// resultNotRun is a selected test ginkgo never started: the run was
	// interrupted or its --timeout elapsed first.
	resultNotRun = "not run"
	// resultVacuous is a test ginkgo reports as passed whose log shows the
	// checks it exists for were never met (see vacuousChecks).
	resultVacuous = "passed without answers"
	// resultStandIn is a test ginkgo reports as passed whose Pods ran the
	// node simulator's stand-in server instead of their images' programs.
	resultStandIn = "passed on stand-ins"
	// resultExpectedFailure is a test of the suite's expected failures
	// that did not pass: no regression.
	resultExpectedFailure = "expected failure"
	// resultSkippedAsUpstream is a test that skipped itself for a reason
	// upstream's jobs meet too (the suite's acceptedSkips).
	resultSkippedAsUpstream = "skipped, as upstream's jobs"
)

// testResult is one selected test (or a suite-level node that failed).
type testResult struct {
	name     string
	result   string
	duration time.Duration
	// message is the failure, the skip reason or the runner's verdict.
	message string
	// location is where the failure happened (file:line).
	location string
	// log is the test's GinkgoWriter output.
	log string
}

func (t testResult) passed() bool { return t.result == resultPassed }

// counts tells whether the test lets the run pass: it passed, it is an
// expected failure, or it skipped itself as it does on upstream's jobs.
func (t testResult) counts() bool {
	return t.passed() || t.result == resultExpectedFailure || t.result == resultSkippedAsUpstream
}

// vacuousCheck finds, in the log of a test ginkgo reports as passed,
// whether what it exists to check happened; "" when it did.
type vacuousCheck func(log string) string

// vacuousChecks are tests of v1.37.1 that pass whatever the cluster does,
// by the text ginkgo gives them (docs/conformance.md explains each).
var vacuousChecks = map[string]vacuousCheck{
	"[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath [Conformance]": proxyWithPathAnswered,
}

var (
	proxyStartRE   = regexp.MustCompile(`Starting http\.Client for (\S+)/(DELETE|GET|HEAD|OPTIONS|PATCH|POST|PUT)\b`)
	proxyAnswerRE  = regexp.MustCompile(`http\.Client request:(\w+) \| StatusCode:200 \| Response:foo \| Method:(\w+)`)
	proxyHeadOKRE  = regexp.MustCompile(`http\.Client request:HEAD \| StatusCode:200\s*$`)
	proxyWantTotal = 14 // 7 verbs, through pods/proxy and services/proxy
)

// proxyWithPathAnswered: the test polls each of 7 verbs through
// pods/proxy and services/proxy for up to a minute, but checks the wrong
// error variable afterwards (proxy.go:409, :420), so it passes when
// nothing ever answers. Its log shows, per request, whether an answer
// came: each "Starting http.Client for <url>/<VERB>" must be followed by a
// 200 with body "foo" and the same method (HEAD: the 200 alone).
func proxyWithPathAnswered(log string) string {
	answered, total := 0, 0
	verb := ""
	ok := false
	finish := func() {
		if verb != "" {
			total++
			if ok {
				answered++
			}
		}
	}
	for _, line := range strings.Split(log, "\n") {
		if m := proxyStartRE.FindStringSubmatch(line); m != nil {
			finish()
			verb, ok = m[2], false
			continue
		}
		if verb == "" || ok {
			continue
		}
		if verb == "HEAD" {
			ok = proxyHeadOKRE.MatchString(line)
		} else if m := proxyAnswerRE.FindStringSubmatch(line); m != nil {
			ok = m[1] == verb && m[2] == verb
		}
	}
	finish()
	if total == proxyWantTotal && answered == total {
		return ""
	}
	return fmt.Sprintf("ginkgo says passed, but %d of the %d proxied requests were answered (%d made): the test checks the wrong error (proxy.go:409, :420)", answered, proxyWantTotal, total)
}

// judge turns ginkgo's reports into the results of the selected tests:
// specs the focus left out are dropped, a test skipped at run time counts
// as not passed (a conformance test must run), suite-level nodes appear
// only when they failed, a pass of a known-vacuous test stands only when
// its log shows the work done, and a pass stands only when no Pod of the
// test ran a stand-in (standInsIn returns the stand-in images of a test's
// namespaces; nil: unknown). selected tells which specs --focus/--skip
// chose, so that a chosen spec ginkgo never started (an interrupted run)
// is not mistaken for one left out. A test of su's expected failures that
// did not pass, and a run-time skip upstream's jobs meet too, are
// reported as such.
func judge(reports []ginkgoReport, standInsIn func(namespaces []string) []string, selected func(suiteDescription, text string) bool, su suite) []testResult {
	var out []testResult
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if t, keep := judgeSpec(r.SuiteDescription, s, standInsIn, selected); keep {
				judgeKnown(&t, su)
				out = append(out, t)
			}
		}
		for _, reason := range r.SpecialSuiteFailureReasons {
			out = append(out, testResult{name: "[suite] " + r.SuiteDescription, result: resultFailed, message: reason})
		}
	}
	slices.SortStableFunc(out, func(a, b testResult) int { return strings.Compare(a.name, b.name) })
	return out
}

// judgeSpec is judge for one spec report; keep is false for a spec that
// is no result of the run (pending, left out, a passing suite node).
func judgeSpec(suite string, s specReport, standInsIn func(namespaces []string) []string, selected func(suiteDescription, text string) bool) (t testResult, keep bool) {
	t = testResult{result: s.State, duration: s.RunTime, log: s.CapturedGinkgoWriterOutput}
	if s.Failure != nil {
		t.message = s.Failure.Message
		if t.message == "" {
			t.message = s.Failure.ForwardedPanic
		}
		if s.Failure.Location.FileName != "" {
			t.location = fmt.Sprintf("%s:%d", trimModulePath(s.Failure.Location.FileName), s.Failure.Location.LineNumber)
		}
	}
	if s.LeafNodeType != "It" {
		if s.State == resultPassed || s.State == resultSkipped {
			return t, false
		}
		t.name = fmt.Sprintf("[%s] %s:%d", s.LeafNodeType, trimModulePath(s.LeafNodeLocation.FileName), s.LeafNodeLocation.LineNumber)
		return t, true
	}
	t.name = s.fullText()
	switch s.State {
	case "pending":
		return t, false
	case resultSkipped:
		if t.message == "" {
			if !selected(suite, t.name) { // left out by --focus/--skip
				return t, false
			}
			t.result, t.message = resultNotRun, "ginkgo never started it: the run was interrupted or its --timeout elapsed"
		}
	case resultPassed:
		judgePass(&t, s, standInsIn)
	}
	return t, true
}

// judgeKnown turns a failure the suite expects into an expected failure,
// and a run-time skip upstream's jobs meet too into an accepted skip.
func judgeKnown(t *testResult, su suite) {
	switch t.result {
	case resultPassed, resultNotRun:
	case resultSkipped:
		if why := su.acceptedSkip(t.message); why != "" {
			t.result, t.message = resultSkippedAsUpstream, why+": "+firstLine(t.message)
		}
	default:
		if why, ok := su.expectedFailures[t.name]; ok {
			t.result, t.message = resultExpectedFailure, why+" (it failed: "+firstLine(t.message)+")"
		}
	}
}

// judgePass lets a pass stand only when its log shows the work done (for
// a known-vacuous test) and no Pod of the test ran a stand-in.
func judgePass(t *testResult, s specReport, standInsIn func(namespaces []string) []string) {
	if check, ok := vacuousChecks[t.name]; ok {
		if why := check(t.log); why != "" {
			t.result, t.message = resultVacuous, why
		}
	}
	if images := standInsIn(s.namespaces()); t.result == resultPassed && len(images) > 0 {
		t.result = resultStandIn
		t.message = fmt.Sprintf("ginkgo says passed, but the test's Pods ran the node simulator's stand-in server, not their images' programs (first reported: %s)", strings.Join(images, ", "))
	}
}

// focusMatcher selects specs as ginkgo's --focus and --skip do: the
// regexps match the suite's description, a space and the spec's text.
func focusMatcher(focus, skip string) (func(suiteDescription, text string) bool, error) {
	focusRE, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("--focus %q: %w", focus, err)
	}
	var skipRE *regexp.Regexp
	if skip != "" {
		if skipRE, err = regexp.Compile(skip); err != nil {
			return nil, fmt.Errorf("--skip %q: %w", skip, err)
		}
	}
	return func(suiteDescription, text string) bool {
		s := suiteDescription + " " + text
		return focusRE.MatchString(s) && (skipRE == nil || !skipRE.MatchString(s))
	}, nil
}

// trimModulePath shortens a path in the module cache to module@version/path.
func trimModulePath(p string) string {
	if i := strings.Index(p, "k8s.io/kubernetes@"); i >= 0 {
		return p[i:]
	}
	return p
}

// runResults is one run: its settings and what came of it.
type runResults struct {
	suite       suite
	upArgs      []string
	procs       int
	focus, skip string
	start       time.Time
	duration    time.Duration
	tests       []testResult
	// upErr is svcnet up's failure (start, stop, exit during the run) or
	// ginkgo's failing to run at all.
	upErr error
	// standIns are the images the node simulator ran as stand-ins, by
	// namespace; nil when not watched.
	standIns *standIns
}

// ok tells whether the run passes: svcnet up worked, some test ran and
// every selected test passed.
func (r *runResults) ok() bool {
	if r.upErr != nil || len(r.tests) == 0 {
		return false
	}
	for _, t := range r.tests {
		if !t.counts() {
			return false
		}
	}
	return true
}

// summary is the Markdown table of the run, for summary.md and the console.
func (r *runResults) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Conformance run of %s\n\n", r.start.Format("2006-01-02 15:04"))
	fmt.Fprintf(&b, "Suite `%s`: %s.\n\n", r.suite.name, r.suite.source)
	fmt.Fprintf(&b, "`svcnet %s`; ginkgo `-p --procs=%d --focus=%s`", joinArgs(r.upArgs), r.procs, r.focus)
	if r.skip != "" {
		fmt.Fprintf(&b, " `--skip=%s`", r.skip)
	}
	fmt.Fprintf(&b, "; took %s.\n\n", r.duration.Round(time.Second))
	counts := map[string]int{}
	for _, t := range r.tests {
		counts[t.result]++
	}
	var parts []string
	for _, res := range []string{resultPassed, resultFailed, "timedout", "panicked", "interrupted", "aborted", resultSkipped, resultNotRun, resultVacuous, resultStandIn, resultExpectedFailure, resultSkippedAsUpstream} {
		if counts[res] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[res], res))
		}
	}
	verdict := "PASS"
	if !r.ok() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "**%s**: %d tests: %s.\n", verdict, len(r.tests), strings.Join(parts, ", "))
	if r.upErr != nil {
		fmt.Fprintf(&b, "\nsvcnet up or ginkgo failed: %s\n", oneLine(r.upErr.Error()))
	}
	if len(r.tests) == 0 {
		b.WriteString("\nNo test ran.\n")
		return b.String()
	}
	b.WriteString("\n| Test | Result | Duration | Failure |\n|---|---|---|---|\n")
	for _, t := range r.tests {
		msg := ""
		if !t.passed() {
			msg = firstLine(t.message)
			if t.location != "" {
				msg += " (" + t.location + ")"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(t.name), t.result, t.duration.Round(100*time.Millisecond), cell(msg))
	}
	r.writeExpectedFailures(&b)
	return b.String()
}

// writeExpectedFailures lists the suite's expected failures with their
// reasons and what became of each in this run.
func (r *runResults) writeExpectedFailures(b *strings.Builder) {
	if len(r.suite.expectedFailures) == 0 {
		return
	}
	got := map[string]string{}
	for _, t := range r.tests {
		got[t.name] = t.result
	}
	b.WriteString("\n## Expected failures\n\nTests a simulated node cannot pass because it is not a real one; their failure is no regression.\n\n| Test | Why | This run |\n|---|---|---|\n")
	for _, name := range slices.Sorted(maps.Keys(r.suite.expectedFailures)) {
		res, ok := got[name]
		switch {
		case !ok:
			res = "not selected"
		case res == resultPassed:
			res = "passed: take it off the list"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", cell(name), cell(r.suite.expectedFailures[name]), res)
	}
}

// maxMessage bounds the failure column.
const maxMessage = 300

// firstLine is the first line of a failure message, joined with the next
// ones while they end in ':' ("Expected success, but got an error:" says
// nothing until the error), shortened to maxMessage.
func firstLine(msg string) string {
	var lines []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		lines = append(lines, l)
		if !strings.HasSuffix(l, ":") || len(lines) == 3 {
			break
		}
	}
	s := strings.Join(lines, " ")
	if len(s) > maxMessage {
		s = s[:maxMessage] + "..."
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell escapes a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(oneLine(s), "|", `\|`)
}

func joinArgs(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"\\$*") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// JUnit, as ginkgo and upstream's CI write it, for the tests that ran.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      float64     `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Status    string        `xml:"status,attr"`
	Time      float64       `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	SystemErr string        `xml:"system-err,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Text    string `xml:",chardata"`
}

func writeJUnit(path string, r *runResults) error {
	suite := junitSuite{
		Name:      "Kubernetes e2e suite on svcnet " + joinArgs(r.upArgs),
		Time:      r.duration.Seconds(),
		Timestamp: r.start.UTC().Format(time.RFC3339),
	}
	if r.upErr != nil {
		suite.Cases = append(suite.Cases, junitCase{
			Name: "svcnet up", Classname: suite.Name, Status: resultFailed,
			Failure: &junitMessage{Message: oneLine(r.upErr.Error()), Type: resultFailed, Text: r.upErr.Error()},
		})
	}
	for _, t := range r.tests {
		c := junitCase{Name: t.name, Classname: suite.Name, Status: t.result, Time: t.duration.Seconds(), SystemErr: t.log}
		switch {
		case t.passed():
		case t.result == resultSkipped || t.result == resultSkippedAsUpstream:
			c.Skipped = &junitMessage{Message: "skipped - " + firstLine(t.message), Text: t.message}
		case t.result == resultExpectedFailure:
			// No regression: reported as skipped, so that tools reading
			// the JUnit count only regressions as failures.
			c.Skipped = &junitMessage{Message: "expected failure - " + firstLine(t.message), Text: t.message}
		default:
			text := t.message
			if t.location != "" {
				text += "\n" + t.location
			}
			c.Failure = &junitMessage{Message: firstLine(t.message), Type: t.result, Text: text}
		}
		suite.Cases = append(suite.Cases, c)
	}
	for _, c := range suite.Cases {
		suite.Tests++
		switch {
		case c.Failure != nil:
			suite.Failures++
		case c.Skipped != nil:
			suite.Skipped++
		}
	}
	doc := junitSuites{Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Time: suite.Time, Suites: []junitSuite{suite}}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}
