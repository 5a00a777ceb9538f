// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command conformance runs upstream Kubernetes' [sig-network] e2e tests
// against `svcnet up`: `make conformance` builds bin/svcnet, the upstream
// binaries and e2e.test (hack/e2e), then runs this program, which builds
// nothing itself. Its -suite chooses the tests (suite.go): the 47
// [sig-network] conformance tests, or upstream's [sig-network] suite as
// its kind-based network CI selects it, with the nodes and zones those
// tests need and the list of tests a simulated node cannot pass.
//
// It enters fresh network and mount namespaces (test/harness/privatens),
// starts `svcnet up` there with a data dir of its own, waits for its tour,
// runs e2e.test with ginkgo's CLI in parallel processes (specs the
// framework marks [Serial] carry ginkgo's Serial decorator, so the CLI runs
// them alone on process 1 after the parallel ones, as in upstream's CI),
// stops `svcnet up`, and writes to the output folder:
//
//	summary.md        the table of tests: result, duration, first line of the failure
//	junit.xml         the tests that ran, with this program's verdicts
//	ginkgo.log        ginkgo's console output
//	ginkgo/           ginkgo's own JUnit and JSON reports
//	svcnet-up.log     svcnet up's output
//	logs/             svcnet up's component logs (etcd, kube-apiserver, ...)
//
// It exits non-zero when a selected test did not pass or `svcnet up`
// failed. A test whose checks the runner knows to be vacuous passes only
// when its log shows the work done (see vacuousChecks).
//
// It is test harness code: not linked into bin/svcnet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/childproc"
	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

// options are the command line.
type options struct {
	svcnet, e2eBinDir, kubectl string
	out                        string
	suite                      string
	focus, skip                string
	procs, nodes               int
	timeout, upTimeout         time.Duration
	upArgs                     []string
}

func parseFlags() options {
	o := options{}
	flag.StringVar(&o.svcnet, "svcnet", "bin/svcnet", "The svcnet binary (make build).")
	flag.StringVar(&o.e2eBinDir, "e2e-bin-dir", "bin/e2e", "Folder with e2e.test and ginkgo (make e2e-bins).")
	flag.StringVar(&o.kubectl, "kubectl", "bin/k8s/kubectl", "The kubectl the tests run (make k8s-bins).")
	flag.StringVar(&o.out, "out", "", "Output folder; empty: _output/conformance/<timestamp>.")
	flag.StringVar(&o.suite, "suite", suiteConformance, "The selection of tests: conformance (the 47 [sig-network] conformance tests), network (upstream's [sig-network] suite as its kind-based network CI selects it) or endpoints-free (the network suite on the Endpoints-free cluster of KEP-4974, as upstream's job for it selects it).")
	flag.StringVar(&o.focus, "focus", "", "Ginkgo --focus: the tests to run, instead of the suite's.")
	flag.StringVar(&o.skip, "skip", "", "Ginkgo --skip: tests to leave out, beside those the suite leaves out.")
	flag.IntVar(&o.procs, "procs", defaultProcs, "Ginkgo processes running tests in parallel.")
	flag.IntVar(&o.nodes, "nodes", 0, "svcnet up --nodes; 0: the suite's (later svcnet up flags win).")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Minute, "Ginkgo --timeout for the whole suite.")
	flag.DurationVar(&o.upTimeout, "up-timeout", 10*time.Minute, "How long svcnet up may take to print its tour.")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags] [-- svcnet up flags]\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	o.upArgs = flag.Args()
	return o
}

// defaultProcs fits two cores: the tests mostly wait (on Pods, on the
// timeouts of what fails), so a run of the 47 used under one core on
// average with 6 or 8 processes (docs/conformance.md). Its length is set
// by the longest tests (ProxyWithPath, DNS ExternalName when they fail);
// the rest spread over the processes, and 8 leaves each under 8 minutes
// of tests where 6 left one with 15.
const defaultProcs = 8

func main() {
	o := parseFlags()
	// Taken before re-executing: the outer process waits for the inner one
	// instead of dying on Ctrl-C, and the inner one stops cleanly.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ns := privatens.Enter()
	if reason := ns.Unavailable(); reason != "" {
		fmt.Fprintln(os.Stderr, "conformance: cannot make the private namespaces svcnet up runs in:", reason)
		os.Exit(1)
	}
	code, err := run(o, sigs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// run does the whole run inside the private namespaces and returns the
// exit code.
func run(o options, sigs <-chan os.Signal) (int, error) {
	start := time.Now()
	su, err := suiteNamed(o.suite)
	if err != nil {
		return 1, err
	}
	su = su.forKernel(kernelHasSCTP())
	o.focus, o.skip = su.selection(o.focus, o.skip)
	selected, err := prepare(&o, start)
	if err != nil {
		return 1, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "conformance: %s: stopping the tests, then svcnet up\n", s)
			cancel()
		case <-ctx.Done():
		}
	}()

	dataDir := filepath.Join(o.out, "svcnet-up")
	upArgs := su.upArgs(o.nodes, o.upArgs)
	results := &runResults{suite: su, upArgs: upArgs, procs: o.procs, focus: o.focus, skip: o.skip, start: start}
	results.upErr = runTests(ctx, o, dataDir, upArgs, results)
	if err := keepLogs(dataDir, o.out); err != nil {
		results.upErr = errors.Join(results.upErr, err)
	}
	report, err := readGinkgoReport(filepath.Join(o.out, "ginkgo", "report.json"))
	if err != nil && results.upErr == nil {
		results.upErr = err
	}
	results.tests = judge(report, results.standIns.in, selected, su)
	results.duration = time.Since(start)
	if err := writeResults(o.out, results); err != nil {
		return 1, err
	}
	if !results.ok() {
		return 1, nil
	}
	return 0, nil
}

// prepare makes o's paths absolute, checks that the programs are built,
// creates the output folder and returns the --focus/--skip matcher.
func prepare(o *options, start time.Time) (func(suiteDescription, text string) bool, error) {
	if o.out == "" {
		o.out = filepath.Join("_output", "conformance", start.Format("20060102-150405"))
	}
	for _, p := range []*string{&o.out, &o.svcnet, &o.e2eBinDir, &o.kubectl} {
		a, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = a
	}
	selected, err := focusMatcher(o.focus, o.skip)
	if err != nil {
		return nil, err
	}
	for _, bin := range []string{o.svcnet, o.kubectl, filepath.Join(o.e2eBinDir, "e2e.test"), filepath.Join(o.e2eBinDir, "ginkgo")} {
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%w (make conformance builds it)", err)
		}
	}
	return selected, os.MkdirAll(o.out, 0o755)
}

// runTests starts svcnet up, runs ginkgo against it while watching for
// stand-in images, and stops svcnet up; it returns svcnet up's or
// ginkgo's failure.
func runTests(ctx context.Context, o options, dataDir string, upArgs []string, results *runResults) error {
	fmt.Printf("conformance: starting svcnet %s (output in %s)\n", joinArgs(upArgs), o.out)
	up, err := startUp(ctx, o.svcnet, append([]string{"up", "--data-dir", dataDir}, upArgs[1:]...), filepath.Join(o.out, "svcnet-up.log"), o.upTimeout)
	if err != nil {
		return err
	}
	fmt.Printf("conformance: svcnet up is ready after %s; running ginkgo with %d processes\n", time.Since(results.start).Round(time.Second), o.procs)
	testCtx, stopTests := context.WithCancel(ctx)
	defer stopTests()
	standIns, err := watchStandIns(testCtx, filepath.Join(dataDir, "kubeconfig"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance: not watching for stand-in images:", err)
	}
	results.standIns = standIns
	go func() {
		select {
		case <-up.exited:
			stopTests()
		case <-testCtx.Done():
		}
	}()
	testErr := runGinkgo(testCtx, o, filepath.Join(dataDir, "kubeconfig"), nodeCount(upArgs))
	stopTests()
	return errors.Join(testErr, up.stop())
}

// writeResults writes junit.xml and summary.md and prints the summary.
func writeResults(out string, results *runResults) error {
	if err := writeJUnit(filepath.Join(out, "junit.xml"), results); err != nil {
		return err
	}
	summary := results.summary()
	if err := os.WriteFile(filepath.Join(out, "summary.md"), []byte(summary), 0o644); err != nil {
		return err
	}
	fmt.Print("\n" + summary)
	fmt.Printf("\nconformance: results in %s\n", out)
	return nil
}

// runGinkgo runs e2e.test under ginkgo's CLI, telling the framework the
// cluster's node count as kind's e2e-k8s.sh does (-num-nodes: tests that
// need several nodes skip themselves without it). A non-zero exit is not
// an error here (failed tests are read from the report); ginkgo not
// running at all is.
func runGinkgo(ctx context.Context, o options, kubeconfig string, nodes int) error {
	reports := filepath.Join(o.out, "ginkgo")
	args := []string{
		"-p", fmt.Sprintf("--procs=%d", o.procs),
		"--timeout=" + o.timeout.String(),
		"--focus=" + o.focus,
	}
	if o.skip != "" {
		args = append(args, "--skip="+o.skip)
	}
	args = append(args,
		"--no-color", "--silence-skips",
		"--junit-report=junit.xml", "--json-report=report.json", "--output-dir="+reports,
		filepath.Join(o.e2eBinDir, "e2e.test"), "--",
		"-kubeconfig", kubeconfig,
		"-provider", "skeleton",
		"-minStartupPods", "0",
		"-allowed-not-ready-nodes", "0",
		"-num-nodes", strconv.Itoa(nodes),
		"-disable-log-dump",
		"-kubectl-path", o.kubectl,
	)
	log, err := os.Create(filepath.Join(o.out, "ginkgo.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(o.e2eBinDir, "ginkgo"), args...)
	cmd.Dir = o.out
	// GO111MODULE=off: ginkgo compares its version with `go list -m` run
	// in e2e.test's folder, which is in svcnet's module (another ginkgo);
	// build.sh built both from hack/e2e's, so they match and the check
	// would only print a false warning.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(o.kubectl)+":"+os.Getenv("PATH"), "GO111MODULE=off")
	cmd.Stdout = io.MultiWriter(os.Stdout, log)
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(log, "ginkgo %s\n", joinArgs(args))
	if err := childproc.Start(cmd); err != nil {
		return fmt.Errorf("starting ginkgo: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// On SIGINT the suite processes end their running specs, clean up
		// and report, and the CLI writes the reports; a terminal sends it
		// to all of them, so the whole process group gets it here too.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err = <-done
		}
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return fmt.Errorf("ginkgo: %w", err)
	}
	return nil
}

// keepLogs moves svcnet up's component logs into the output folder and
// drops etcd's data, the only large part of the data dir. The rest (the
// Pods' folders with their containers' logs, credentials) stays for
// debugging: Pod folders may have held mounts, so nothing walks them.
func keepLogs(dataDir, out string) error {
	if _, err := os.Stat(filepath.Join(dataDir, "logs")); err == nil {
		if err := os.Rename(filepath.Join(dataDir, "logs"), filepath.Join(out, "logs")); err != nil {
			return fmt.Errorf("keeping svcnet up's logs: %w", err)
		}
	}
	return os.RemoveAll(filepath.Join(dataDir, "etcd"))
}
