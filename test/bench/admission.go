// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// admissionWorkers create Services in parallel, as a busy cluster would.
const admissionWorkers = 32

type admScenario struct {
	name     string
	services int
	svcType  corev1.ServiceType
}

type admResult struct {
	wall          time.Duration
	clientLatency []time.Duration // per create, as the client saw it
	webhookP50    float64         // seconds inside the webhook, from its histogram
	webhookP99    float64
	cpu, rssMiB   float64
}

func admScenarios(scale int) []admScenario {
	return []admScenario{
		{name: fmt.Sprintf("(e) create %d ClusterIP Services", 5000/scale), services: 5000 / scale, svcType: corev1.ServiceTypeClusterIP},
		{name: fmt.Sprintf("(f) create %d NodePort Services", 2000/scale), services: 2000 / scale, svcType: corev1.ServiceTypeNodePort},
	}
}

// runAdmission creates the scenario's Services against a fresh API server,
// through svcnet's webhook (a separate `svcnet manager` process) when
// withSvcnet, else with kube-apiserver allocating alone.
func runAdmission(ctx context.Context, root, workDir string, sc admScenario, withSvcnet bool) (admResult, error) {
	var res admResult
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: "10.96.0.0/16"})
	if err != nil {
		return res, err
	}
	defer func() { _ = env.Stop() }()
	ns, err := env.Namespace(ctx, "bench")
	if err != nil {
		return res, err
	}
	var p *proc
	metricsURL := ""
	if withSvcnet {
		if p, metricsURL, err = startWebhook(ctx, env, root, workDir); err != nil {
			return res, err
		}
		defer p.stop()
	}
	start := time.Now()
	if res.clientLatency, err = createServices(ctx, env, ns, sc); err != nil {
		return res, err
	}
	res.wall = time.Since(start)
	if withSvcnet {
		res.cpu, res.rssMiB = p.cpuSeconds(), p.peakRSSMiB()
		if res.webhookP50, res.webhookP99, err = webhookQuantiles(ctx, metricsURL); err != nil {
			return res, err
		}
	}
	return res, nil
}

// startWebhook runs `svcnet manager` with only the allocating controllers
// and installs its webhook; it returns the process and its metrics URL
// once it is ready.
func startWebhook(ctx context.Context, env *testenv.Env, root, workDir string) (*proc, string, error) {
	kc := filepath.Join(workDir, "kubeconfig")
	if err := env.WriteKubeconfig(kc); err != nil {
		return nil, "", err
	}
	ports := make([]int, 3)
	for i := range ports {
		var err error
		if ports[i], err = testenv.FreePort(); err != nil {
			return nil, "", err
		}
	}
	if err := svcnetconfig.InstallWebhook(ctx, env.Client, fmt.Sprintf("https://127.0.0.1:%d", ports[2])); err != nil {
		return nil, "", err
	}
	p, err := startProc(filepath.Join(workDir, "svcnet.log"), filepath.Join(root, "bin/svcnet"), "manager", "--kubeconfig="+kc,
		"--controllers=clusterip,nodeport", "--leader-elect=false", "--metrics-secure=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[2]), "--webhook-cert-dir="+filepath.Join(workDir, "certs"),
		"--webhook-secret-namespace=kube-system", "--webhook-cert-extra-hosts=127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	if err := testenv.WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]), time.Minute); err != nil {
		p.stop()
		return nil, "", fmt.Errorf("svcnet manager not ready: %w (log: %s)", err, filepath.Join(workDir, "svcnet.log"))
	}
	return p, fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), nil
}

// createServices creates the scenario's Services from admissionWorkers
// clients at once and checks that each got its addresses; it returns each
// create's latency. After a failure the workers drain the queue without
// creating, and the first error is returned.
func createServices(ctx context.Context, env *testenv.Env, ns string, sc admScenario) ([]time.Duration, error) {
	latency := make([]time.Duration, sc.services)
	work := make(chan int)
	errs := make(chan error, admissionWorkers)
	var failed atomic.Bool
	for range admissionWorkers {
		go func() {
			var first error
			for i := range work {
				if failed.Load() {
					continue
				}
				svc := builder.Service(fmt.Sprintf("s%d", i), ns).Type(sc.svcType).Port("http", 80, intstr.FromInt32(8080)).Selector("app", "x").Obj()
				t0 := time.Now()
				err := env.Client.Create(ctx, svc)
				latency[i] = time.Since(t0)
				if err == nil && (svc.Spec.ClusterIP == "" || (sc.svcType == corev1.ServiceTypeNodePort && svc.Spec.Ports[0].NodePort == 0)) {
					err = fmt.Errorf("service %s created without its addresses", svc.Name)
				}
				if err != nil {
					first = err
					failed.Store(true)
				}
			}
			errs <- first
		}()
	}
	for i := range sc.services {
		work <- i
	}
	close(work)
	var all []error
	for range admissionWorkers {
		all = append(all, <-errs)
	}
	return latency, errors.Join(all...)
}

// webhookQuantiles reads svcnet_admission_duration_seconds of the patched
// requests and estimates p50 and p99 as Prometheus' histogram_quantile does.
func webhookQuantiles(ctx context.Context, url string) (float64, float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	type bucket struct{ le, count float64 }
	var buckets []bucket
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "svcnet_admission_duration_seconds_bucket{") || !strings.Contains(line, `outcome="patched"`) {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.Index(line[i+4:], `"`)
		le, err1 := strconv.ParseFloat(line[i+4:i+4+j], 64)
		if line[i+4:i+4+j] == "+Inf" {
			le, err1 = math.Inf(1), nil
		}
		fields := strings.Fields(line)
		count, err2 := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		buckets = append(buckets, bucket{le, count})
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return 0, 0, fmt.Errorf("no svcnet_admission_duration_seconds samples at %s", url)
	}
	quantile := func(q float64) float64 {
		rank := q * buckets[len(buckets)-1].count
		prevLE, prevCount := 0.0, 0.0
		for _, b := range buckets {
			if b.count >= rank {
				if math.IsInf(b.le, 1) {
					return prevLE
				}
				return prevLE + (b.le-prevLE)*(rank-prevCount)/max(b.count-prevCount, 1)
			}
			prevLE, prevCount = b.le, b.count
		}
		return prevLE
	}
	return quantile(0.5), quantile(0.99), nil
}

func percentile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// admRun is one run of a scenario as recorded: its wall time and the
// figures of its creates (the latencies' quantiles from every create of
// the run, the webhook's from its histogram).
type admRun struct {
	Svcnet     bool          `json:"svcnet"`
	Wall       time.Duration `json:"wall"`
	Creates    int           `json:"creates"`
	ClientP50  time.Duration `json:"clientP50"`
	ClientP99  time.Duration `json:"clientP99"`
	WebhookP50 time.Duration `json:"webhookP50,omitempty"`
	WebhookP99 time.Duration `json:"webhookP99,omitempty"`
	CPU        float64       `json:"cpu,omitempty"`
	RSSMiB     float64       `json:"rssMiB,omitempty"`
}

func admRunOf(r admResult, svcnet bool) admRun {
	return admRun{Svcnet: svcnet, Wall: r.wall, Creates: len(r.clientLatency), ClientP50: percentile(r.clientLatency, 0.5),
		ClientP99: percentile(r.clientLatency, 0.99), WebhookP50: time.Duration(r.webhookP50 * float64(time.Second)),
		WebhookP99: time.Duration(r.webhookP99 * float64(time.Second)), CPU: r.cpu, RSSMiB: r.rssMiB}
}

// admScenarioRuns are a scenario's runs, the two sides interleaved.
type admScenarioRuns struct {
	Name     string   `json:"name"`
	Services int      `json:"services"`
	Runs     []admRun `json:"runs"`
}

// admData is (e) and (f)'s record.
type admData struct {
	Workers   int               `json:"workers"`
	Repeats   int               `json:"repeats"`
	Scenarios []admScenarioRuns `json:"scenarios"`
}

const admTitle = "## Allocation at admission: svcnet's webhook vs kube-apiserver alone"

func admissionReport(ctx context.Context, root string, scale int, only string, keep bool) (string, error) {
	rec := newRecord[admData](root, "ef")
	rec.Tools["kube-apiserver"] = toolVersion(filepath.Join(root, "bin/k8s/kube-apiserver"))
	data := admData{Workers: admissionWorkers, Repeats: *repeats}
	sampler := newLoadSampler()
	for _, sc := range admScenarios(scale) {
		if only != "" && !strings.ContainsRune(only, rune(sc.name[1])) {
			continue
		}
		runs := admScenarioRuns{Name: sc.name, Services: sc.services}
		// The sides alternate, so that a slow minute of a shared
		// machine falls on both.
		for i := range *repeats {
			for _, withSvcnet := range []bool{false, true} {
				dir, err := os.MkdirTemp("", "svcnet-bench-")
				if err != nil {
					return "", err
				}
				progress("%s, svcnet=%v (run %d/%d)\n", sc.name, withSvcnet, i+1, *repeats)
				r, err := runAdmission(ctx, root, dir, sc, withSvcnet)
				if err != nil {
					return "", fmt.Errorf("%s: %w", sc.name, err)
				}
				_ = os.RemoveAll(dir)
				runs.Runs = append(runs.Runs, admRunOf(r, withSvcnet))
			}
		}
		data.Scenarios = append(data.Scenarios, runs)
	}
	return rec.close(root, sampler, data, keep, renderAdmission)
}

// renderAdmission writes (e) and (f) from their record alone.
func renderAdmission(rec *record[admData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(admTitle))
	fmt.Fprintf(&b, "A fresh kube-apiserver (%s) per run; %d client workers create the Services (QPS 1000). "+
		"\"kube-apiserver alone\" has no webhook: it allocates ClusterIPs and nodePorts itself. "+
		"\"svcnet\" runs `svcnet manager --controllers=clusterip,nodeport` as its own process, its webhook installed by URL on loopback: "+
		"svcnet chooses, kube-apiserver commits. Throughput is Services created per second; latencies are per create as the client saw it "+
		"(p50 and p99 of each run's creates), and inside the webhook from svcnet's svcnet_admission_duration_seconds histogram "+
		"(interpolated like histogram_quantile). Each side runs %d times, the sides alternating; each cell is the median of the runs "+
		"with the smallest and largest, and the ratio is of the medians. %s\n\n", rec.Tools["kube-apiserver"], d.Workers, d.Repeats, rec.loadNote())
	b.WriteString("| scenario | allocator | Services/s | client p50 (ms) | client p99 (ms) | webhook p50 (ms) | webhook p99 (ms) | svcnet CPU s | svcnet peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, sc := range d.Scenarios {
		var tput [2]float64
		for k, side := range []string{"kube-apiserver alone", "svcnet"} {
			runs := runsWhere(sc.Runs, func(r admRun) bool { return r.Svcnet == (k == 1) })
			col := func(f func(admRun) float64, format string) string { return spreadOf(column(runs, f), format) }
			tputs := column(runs, func(r admRun) float64 { return float64(sc.Services) / r.Wall.Seconds() })
			tput[k] = median(tputs)
			hook, proc := "| - | - |", "- | -"
			if k == 1 {
				hook = fmt.Sprintf("| %s | %s |", col(func(r admRun) float64 { return millis(r.WebhookP50) }, "%.2f"),
					col(func(r admRun) float64 { return millis(r.WebhookP99) }, "%.2f"))
				proc = fmt.Sprintf("%s | %s", col(func(r admRun) float64 { return r.CPU }, "%.2f"), col(func(r admRun) float64 { return r.RSSMiB }, "%.0f"))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s %s %s |\n", sc.Name, side, spreadOf(tputs, "%.0f"),
				col(func(r admRun) float64 { return millis(r.ClientP50) }, "%.1f"), p99Cell(runs, col(func(r admRun) float64 { return millis(r.ClientP99) }, "%.1f")), hook, proc)
		}
		fmt.Fprintf(&b, "| %s | **svcnet/alone** | **%.2fx** | | | | | | |\n", sc.Name, ratio(tput[1], tput[0]))
	}
	return b.String()
}

// p99Cell is a p99 column's cell: named only when each run had at least
// ten creates beyond it.
func p99Cell(runs []admRun, cell string) string {
	for _, r := range runs {
		if r.Creates < 1000 {
			return fmt.Sprintf("- (%d creates)", r.Creates)
		}
	}
	return cell
}
