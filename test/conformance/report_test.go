// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

const proxyWithPath = "[sig-network] Proxy version v1 A set of valid responses are returned for both pod and service ProxyWithPath [Conformance]"

// proxyLog writes ProxyWithPath's log as framework.Logf does, with the
// verbs whose requests were answered.
func proxyLog(answered map[string]bool) string {
	var b strings.Builder
	for _, kind := range []string{"pods/agnhost", "services/test-service"} {
		for _, verb := range []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"} {
			fmt.Fprintf(&b, "Nov 25 12:00:00.000: INFO: Starting http.Client for https://127.0.0.1:6443/api/v1/namespaces/proxy-1/%s/proxy/some/path/with/%s\n", kind, verb)
			if !answered[kind+" "+verb] {
				fmt.Fprintf(&b, "Nov 25 12:00:00.000: INFO: Failed to process jsonResponse. invalid character 'E' looking for beginning of value\n")
				continue
			}
			if verb == "HEAD" {
				fmt.Fprintf(&b, "Nov 25 12:00:00.000: INFO: http.Client request:HEAD | StatusCode:200\n")
			} else {
				fmt.Fprintf(&b, "Nov 25 12:00:00.000: INFO: http.Client request:%s | StatusCode:200 | Response:foo | Method:%s\n", verb, verb)
			}
		}
	}
	return b.String()
}

func allAnswered() map[string]bool {
	m := map[string]bool{}
	for _, kind := range []string{"pods/agnhost", "services/test-service"} {
		for _, verb := range []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"} {
			m[kind+" "+verb] = true
		}
	}
	return m
}

func TestProxyWithPathAnswered(t *testing.T) {
	someUnanswered := allAnswered()
	delete(someUnanswered, "services/test-service HEAD")
	delete(someUnanswered, "pods/agnhost POST")
	tests := map[string]struct {
		log  string
		want string
	}{
		"every request answered": {log: proxyLog(allAnswered()), want: ""},
		"nothing answered": {
			log:  proxyLog(nil),
			want: "ginkgo says passed, but 0 of the 14 proxied requests were answered (14 made): the test checks the wrong error (proxy.go:409, :420)",
		},
		"two unanswered": {
			log:  proxyLog(someUnanswered),
			want: "ginkgo says passed, but 12 of the 14 proxied requests were answered (14 made): the test checks the wrong error (proxy.go:409, :420)",
		},
		"a 200 with another method is no answer": {
			log: strings.Replace(proxyLog(allAnswered()),
				"request:PUT | StatusCode:200 | Response:foo | Method:PUT", "request:PUT | StatusCode:200 | Response:foo | Method:GET", 1),
			want: "ginkgo says passed, but 13 of the 14 proxied requests were answered (14 made): the test checks the wrong error (proxy.go:409, :420)",
		},
		"no log": {
			log:  "",
			want: "ginkgo says passed, but 0 of the 14 proxied requests were answered (0 made): the test checks the wrong error (proxy.go:409, :420)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, proxyWithPathAnswered(tc.log)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func withNamespace(s specReport, ns string) specReport {
	s.SpecEvents = append(s.SpecEvents, specEvent{Message: "set up framework"}, specEvent{Message: fmt.Sprintf(`Destroying namespace %q for this suite.`, ns)})
	return s
}

func TestJudge(t *testing.T) {
	spec := func(texts []string, leaf, state string, f *specFailure, log string) specReport {
		return specReport{ContainerHierarchyTexts: texts, LeafNodeType: "It", LeafNodeText: leaf, State: state, RunTime: 2 * time.Second, Failure: f, CapturedGinkgoWriterOutput: log}
	}
	reports := []ginkgoReport{{
		SuiteDescription: "Kubernetes e2e suite",
		SpecReports: []specReport{
			{LeafNodeType: "SynchronizedBeforeSuite", State: "passed"},
			spec([]string{"[sig-network] DNS"}, "should provide DNS for the cluster [Conformance]", "passed", nil, ""),
			withNamespace(spec([]string{"[sig-network] DNS"}, "should provide DNS for services [Conformance]", "passed", nil, ""), "dns-1"),
			withNamespace(spec([]string{"[sig-network] DNS"}, "should provide /etc/hosts entries for the cluster [Conformance]", "passed", nil, ""), "dns-2"),
			spec([]string{"[sig-storage] Volumes"}, "left out by the focus", "skipped", nil, ""),
			spec([]string{"[sig-network] Services"}, "never started [Conformance]", "skipped", nil, ""),
			spec([]string{"[sig-network] Services"}, "should serve a basic endpoint from pods [Conformance]", "failed",
				&specFailure{Message: "Expected success, but got an error:\n    <*errors.errorString>: \n    pod not ready\n", Location: codeLocation{FileName: "/root/go/pkg/mod/k8s.io/kubernetes@v1.37.1/test/e2e/network/service.go", LineNumber: 42}}, ""),
			spec([]string{"[sig-network] HostPort"}, "needs two nodes [Conformance]", "skipped", &specFailure{Message: "Requires at least 2 nodes"}, ""),
			spec([]string{"[sig-network] Proxy version v1"}, "A set of valid responses are returned for both pod and service ProxyWithPath [Conformance]", "passed", nil, proxyLog(nil)),
			{LeafNodeType: "SynchronizedAfterSuite", State: "failed", LeafNodeLocation: codeLocation{FileName: "/x/k8s.io/kubernetes@v1.37.1/test/e2e/e2e.go", LineNumber: 7}, Failure: &specFailure{Message: "cleanup failed"}},
		},
	}}
	selected, err := focusMatcher(`\[sig-network\].*\[Conformance\]`, "")
	if err != nil {
		t.Fatal(err)
	}
	got := judge(reports, func(ns []string) []string {
		if slices.Contains(ns, "dns-1") {
			return []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1"}
		}
		return nil
	}, selected, suites[suiteConformance])
	type row struct{ Name, Result, Message, Location string }
	var rows []row
	for _, r := range got {
		rows = append(rows, row{r.name, r.result, firstLine(r.message), r.location})
	}
	want := []row{
		{"[SynchronizedAfterSuite] k8s.io/kubernetes@v1.37.1/test/e2e/e2e.go:7", "failed", "cleanup failed", ""},
		{"[sig-network] DNS should provide /etc/hosts entries for the cluster [Conformance]", "passed", "", ""},
		{"[sig-network] DNS should provide DNS for services [Conformance]", resultStandIn, "ginkgo says passed, but the test's Pods ran the node simulator's stand-in server, not their images' programs (first reported: registry.k8s.io/e2e-test-images/agnhost:2.66.1)", ""},
		{"[sig-network] DNS should provide DNS for the cluster [Conformance]", "passed", "", ""},
		{"[sig-network] HostPort needs two nodes [Conformance]", "skipped", "Requires at least 2 nodes", ""},
		{proxyWithPath, resultVacuous, "ginkgo says passed, but 0 of the 14 proxied requests were answered (14 made): the test checks the wrong error (proxy.go:409, :420)", ""},
		{"[sig-network] Services never started [Conformance]", resultNotRun, "ginkgo never started it: the run was interrupted or its --timeout elapsed", ""},
		{"[sig-network] Services should serve a basic endpoint from pods [Conformance]", "failed", "Expected success, but got an error: <*errors.errorString>: pod not ready", "k8s.io/kubernetes@v1.37.1/test/e2e/network/service.go:42"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestOK(t *testing.T) {
	pass := testResult{name: "a", result: resultPassed}
	fail := testResult{name: "b", result: resultFailed}
	skip := testResult{name: "c", result: resultSkipped}
	tests := map[string]struct {
		r    runResults
		want bool
	}{
		"all passed":                 {r: runResults{tests: []testResult{pass}}, want: true},
		"one failed":                 {r: runResults{tests: []testResult{pass, fail}}, want: false},
		"skipped at runtime":         {r: runResults{tests: []testResult{pass, skip}}, want: false},
		"expected failure":           {r: runResults{tests: []testResult{pass, {name: "d", result: resultExpectedFailure}}}, want: true},
		"skipped as upstream's jobs": {r: runResults{tests: []testResult{pass, {name: "e", result: resultSkippedAsUpstream}}}, want: true},
		"nothing ran":                {r: runResults{}, want: false},
		"svcnet up failed":           {r: runResults{tests: []testResult{pass}, upErr: errors.New("exited")}, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.r.ok(); got != tc.want {
				t.Errorf("ok() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	r := runResults{
		suite:  suites[suiteConformance],
		upArgs: []string{"up", "--nodes=2", "--proxy-mode=iptables"}, procs: 6, focus: suites[suiteConformance].focus,
		start: time.Date(2025, 11, 25, 12, 0, 0, 0, time.UTC), duration: 17*time.Minute + 3*time.Second,
		tests: []testResult{
			{name: "[sig-network] A [Conformance]", result: resultPassed, duration: 1500 * time.Millisecond},
			{name: "[sig-network] B [Conformance]", result: resultFailed, duration: 2 * time.Minute, message: "error | with a pipe\nmore", location: "service.go:1"},
		},
	}
	want := "# Conformance run of 2025-11-25 12:00\n\n" +
		"Suite `conformance`: the [sig-network] tests of the conformance profile.\n\n" +
		"`svcnet up --nodes=2 --proxy-mode=iptables`; ginkgo `-p --procs=6 --focus=\\[sig-network\\].*\\[Conformance\\]`; took 17m3s.\n\n" +
		"**FAIL**: 2 tests: 1 passed, 1 failed.\n\n" +
		"| Test | Result | Duration | Failure |\n|---|---|---|---|\n" +
		"| [sig-network] A [Conformance] | passed | 1.5s |  |\n" +
		"| [sig-network] B [Conformance] | failed | 2m0s | error \\| with a pipe (service.go:1) |\n"
	if diff := cmp.Diff(want, r.summary()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestStandIns(t *testing.T) {
	s := &standIns{images: map[string][]string{}}
	for _, ev := range []struct{ ns, msg string }{
		{"dns-1", `image "registry.k8s.io/e2e-test-images/agnhost:2.66.1" is not one the node simulator runs for real: container webserver is a stand-in`},
		{"dns-1", `image "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1" is not one the node simulator runs for real`},
		{"dns-1", `image "registry.k8s.io/e2e-test-images/agnhost:2.66.1" is not one the node simulator runs for real: container querier`},
		{"proxy-2", `a message without an image`},
		{"svc-latency-3", `image "registry.k8s.io/pause:3.10.2" is not one the node simulator runs for real`},
		{"endpoints-4", `image "registry.k8s.io/e2e-test-images/nginx:1.27.0-2" is not one the node simulator runs for real`},
	} {
		s.add(&corev1.Event{InvolvedObject: corev1.ObjectReference{Namespace: ev.ns}, Message: ev.msg})
	}
	tests := map[string]struct {
		namespaces []string
		want       []string
	}{
		"one namespace, two images":           {namespaces: []string{"dns-1"}, want: []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1"}},
		"no image in the message":             {namespaces: []string{"proxy-2"}, want: []string{"an unknown image"}},
		"no stand-in":                         {namespaces: []string{"services-3"}, want: nil},
		"pause and nginx stand in faithfully": {namespaces: []string{"svc-latency-3", "endpoints-4"}, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, s.in(tc.namespaces)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	var unwatched *standIns
	if got := unwatched.in([]string{"dns-1"}); got != nil {
		t.Errorf("a nil standIns found %v", got)
	}
}
