// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// Settings shared by both controllers in every run.
const (
	esQPS         = "100"
	esBurst       = "200"
	esBatchPeriod = "0s"
	esNodes       = 10
	esTimeout     = 5 * time.Minute
)

type esScenario struct {
	name           string
	services, pods int // pods per service
	rollSteps      int // rolling replacement in this many equal steps
	scaleTo        int // scale the (single) service down to this many Pods
}

type esResult struct {
	converge  time.Duration // of the measured phase
	writes    int64         // EndpointSlice writes in the measured phase
	slices    int
	endpoints int
	cpu       float64
	rssMiB    float64
}

// esImpl is one EndpointSlice controller under test.
type esImpl struct {
	name      string
	managedBy string
	argv      func(kubeconfig string) []string
}

func esImpls(root string) []esImpl {
	return []esImpl{
		{
			name: "svcnet", managedBy: endpointslice.ManagedBy,
			argv: func(kc string) []string {
				return []string{filepath.Join(root, "bin/svcnet"), "manager", "--kubeconfig=" + kc, "--controllers=endpointslice",
					"--metrics-bind-address=0", "--health-probe-bind-address=0",
					"--kube-api-qps=" + esQPS, "--kube-api-burst=" + esBurst, "--endpointslice-updates-batch-period=" + esBatchPeriod,
					"--pprof-bind-address=" + os.Getenv("SVCNET_BENCH_PPROF")}
			},
		},
		{
			name: "kube-controller-manager", managedBy: endpointslice.ManagedBy, // the same label: svcnet replaces it
			argv: func(kc string) []string {
				return []string{filepath.Join(root, "bin/k8s/kube-controller-manager"), "--kubeconfig=" + kc,
					"--controllers=endpointslice-controller", "--leader-elect=false", "--secure-port=0",
					"--kube-api-qps=" + esQPS, "--kube-api-burst=" + esBurst, "--endpointslice-updates-batch-period=" + esBatchPeriod}
			},
		},
	}
}

func esScenarios(scale int) []esScenario {
	return []esScenario{
		{name: fmt.Sprintf("(a) 1 Service x %d Pods", 5000/scale), services: 1, pods: 5000 / scale},
		{name: fmt.Sprintf("(b) %d Services x 10 Pods", 500/scale), services: 500 / scale, pods: 10},
		{name: fmt.Sprintf("(c) rolling replacement of %d Pods in 10%% steps", 1000/scale), services: 1, pods: 1000 / scale, rollSteps: 10},
		{name: fmt.Sprintf("(d) scale %d -> %d Pods", 1000/scale, 150/scale), services: 1, pods: 1000 / scale, scaleTo: 150 / scale},
	}
}

// esWorld is the objects of one run, and what the slices should hold.
type esWorld struct {
	env  *testenv.Env
	ns   string
	next atomic.Int64 // Pod counter, for unique names and IPs

	mu   sync.Mutex
	pods map[string][]string // service -> Pod names, oldest first
	ips  map[string]string   // Pod name -> IP
}

func (w *esWorld) createPods(ctx context.Context, svc string, n int) error {
	names := make([]string, n)
	err := testenv.Parallel(n, func(i int) error {
		k := w.next.Add(1)
		name := fmt.Sprintf("%s-%d", svc, k)
		ip := fmt.Sprintf("10.%d.%d.%d", 100+k/65536, (k/256)%256, k%256)
		pod := builder.Pod(name, w.ns).Label("app", svc).ContainerPort("http", 8080).
			Node(fmt.Sprintf("bench-node-%d", k%esNodes)).IP(ip).Ready().Obj()
		if err := w.env.CreatePod(ctx, pod); err != nil {
			return err
		}
		names[i] = name
		w.mu.Lock()
		w.ips[name] = ip
		w.mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.pods[svc] = append(w.pods[svc], names...)
	w.mu.Unlock()
	return nil
}

func (w *esWorld) deletePods(ctx context.Context, svc string, n int) error {
	w.mu.Lock()
	victims := slices.Clone(w.pods[svc][:n])
	w.pods[svc] = w.pods[svc][n:]
	w.mu.Unlock()
	return testenv.Parallel(len(victims), func(i int) error {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: victims[i]}}
		return w.env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))
	})
}

// converged reports whether the slices of managedBy hold exactly the
// ready Pods of every Service, and how many slices and endpoints there are.
func (w *esWorld) converged(ctx context.Context, managedBy string) (bool, int, int, error) {
	var list discoveryv1.EndpointSliceList
	if err := w.env.Client.List(ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{discoveryv1.LabelManagedBy: managedBy}); err != nil {
		return false, 0, 0, err
	}
	got := map[string][]string{}
	endpoints := 0
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				got[svc] = append(got[svc], ep.Addresses[0])
				endpoints++
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for svc, names := range w.pods {
		want := make([]string, 0, len(names))
		for _, n := range names {
			want = append(want, w.ips[n])
		}
		slices.Sort(want)
		have := got[svc]
		slices.Sort(have)
		if !slices.Equal(want, have) {
			return false, len(list.Items), endpoints, nil
		}
	}
	return true, len(list.Items), endpoints, nil
}

func (w *esWorld) waitConverged(ctx context.Context, managedBy string) (int, int, error) {
	deadline := time.Now().Add(esTimeout)
	for {
		ok, n, eps, err := w.converged(ctx, managedBy)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			return n, eps, nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("not converged after %s (%d slices, %d ready endpoints)", esTimeout, n, eps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runES runs one scenario against one controller on a fresh API server.
func runES(ctx context.Context, root, workDir string, impl esImpl, sc esScenario) (esResult, error) {
	var res esResult
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: "10.96.0.0/16"})
	if err != nil {
		return res, err
	}
	defer func() { _ = env.Stop() }()
	kc := filepath.Join(workDir, "kubeconfig")
	if err := env.WriteKubeconfig(kc); err != nil {
		return res, err
	}
	w, err := newESWorld(ctx, env, sc)
	if err != nil {
		return res, err
	}
	writes, stopCounting, err := countSliceWrites(ctx, env, w.ns, impl.managedBy)
	if err != nil {
		return res, err
	}
	defer stopCounting()

	p, err := startProc(filepath.Join(workDir, impl.name+".log"), impl.argv(kc)...)
	if err != nil {
		return res, err
	}
	defer p.stop()
	if res.slices, res.endpoints, err = w.waitConverged(ctx, impl.managedBy); err != nil {
		return res, fmt.Errorf("%s initial sync: %w (log: %s)", impl.name, err, filepath.Join(workDir, impl.name+".log"))
	}
	res.converge = time.Since(p.started)
	res.writes = writes.Load()
	if sc.rollSteps > 0 || sc.scaleTo > 0 {
		if err := w.change(ctx, impl, sc, writes, &res); err != nil {
			return res, err
		}
	}
	res.cpu = p.cpuSeconds()
	res.rssMiB = p.peakRSSMiB()
	return res, nil
}

// newESWorld creates the scenario's Nodes, Services and Pods.
func newESWorld(ctx context.Context, env *testenv.Env, sc esScenario) (*esWorld, error) {
	ns, err := env.Namespace(ctx, "bench")
	if err != nil {
		return nil, err
	}
	w := &esWorld{env: env, ns: ns, pods: map[string][]string{}, ips: map[string]string{}}
	for i := range esNodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-node-%d", i), Labels: map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%3)}}}
		if err := env.Client.Create(ctx, node); err != nil {
			return nil, err
		}
	}
	for s := range sc.services {
		name := fmt.Sprintf("svc%d", s)
		svc := builder.Service(name, ns).Port("http", 80, intstr.FromString("http")).Selector("app", name).Obj()
		if err := env.Client.Create(ctx, svc); err != nil {
			return nil, err
		}
		if err := w.createPods(ctx, name, sc.pods); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// countSliceWrites counts one controller's slice writes from a watch.
func countSliceWrites(ctx context.Context, env *testenv.Env, ns, managedBy string) (*atomic.Int64, func(), error) {
	var writes atomic.Int64
	var sl discoveryv1.EndpointSliceList
	watcher, err := env.WatchClient().Watch(ctx, &sl, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelManagedBy: managedBy})
	if err != nil {
		return nil, nil, err
	}
	go func() {
		for ev := range watcher.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted {
				writes.Add(1)
			}
		}
	}()
	return &writes, watcher.Stop, nil
}

// change runs the scenario's rolling update or scale-down after the
// initial sync, and measures it into res.
func (w *esWorld) change(ctx context.Context, impl esImpl, sc esScenario, writes *atomic.Int64, res *esResult) error {
	time.Sleep(time.Second) // let the last writes' events arrive
	writes.Store(0)
	start := time.Now()
	if sc.rollSteps > 0 {
		step := sc.pods / sc.rollSteps
		for range sc.rollSteps {
			if err := w.createPods(ctx, "svc0", step); err != nil {
				return err
			}
			if err := w.deletePods(ctx, "svc0", step); err != nil {
				return err
			}
			if _, _, err := w.waitConverged(ctx, impl.managedBy); err != nil {
				return fmt.Errorf("%s rolling step: %w", impl.name, err)
			}
		}
	} else if err := w.deletePods(ctx, "svc0", sc.pods-sc.scaleTo); err != nil {
		return err
	}
	var err error
	if res.slices, res.endpoints, err = w.waitConverged(ctx, impl.managedBy); err != nil {
		return fmt.Errorf("%s: %w", impl.name, err)
	}
	res.converge = time.Since(start)
	time.Sleep(time.Second) // writes that follow convergence (compaction) count too
	res.writes = writes.Load()
	if _, n, _, err := w.converged(ctx, impl.managedBy); err == nil {
		res.slices = n
	}
	return nil
}

// esRun is one run of a scenario by one controller, as recorded.
type esRun struct {
	Controller string        `json:"controller"`
	Converge   time.Duration `json:"converge"`
	Writes     int64         `json:"writes"`
	Slices     int           `json:"slices"`
	Endpoints  int           `json:"endpoints"`
	CPU        float64       `json:"cpu"`
	RSSMiB     float64       `json:"rssMiB"`
}

// esScenarioRuns are a scenario's runs, the controllers alternating.
type esScenarioRuns struct {
	Name string  `json:"name"`
	Runs []esRun `json:"runs"`
}

// esData is (a) to (d)'s record.
type esData struct {
	QPS         string           `json:"qps"`
	Burst       string           `json:"burst"`
	BatchPeriod string           `json:"batchPeriod"`
	Nodes       int              `json:"nodes"`
	Repeats     int              `json:"repeats"`
	Scenarios   []esScenarioRuns `json:"scenarios"`
}

const esTitle = "## EndpointSlice controller: svcnet vs kube-controller-manager"

func esReport(ctx context.Context, root string, scale int, only string, keep bool) (string, error) {
	rec := newRecord[esData](root, "abcd")
	rec.Tools["kube-controller-manager"] = toolVersion(filepath.Join(root, "bin/k8s/kube-controller-manager"))
	data := esData{QPS: esQPS, Burst: esBurst, BatchPeriod: esBatchPeriod, Nodes: esNodes, Repeats: *repeats}
	sampler := newLoadSampler()
	for _, sc := range esScenarios(scale) {
		if only != "" && !strings.ContainsRune(only, rune(sc.name[1])) {
			continue
		}
		runs := esScenarioRuns{Name: sc.name}
		for i := range *repeats {
			for _, impl := range esImpls(root) {
				r, err := runESOnce(ctx, root, impl, sc, i)
				if err != nil {
					return "", err
				}
				runs.Runs = append(runs.Runs, esRun{Controller: impl.name, Converge: r.converge, Writes: r.writes, Slices: r.slices,
					Endpoints: r.endpoints, CPU: r.cpu, RSSMiB: r.rssMiB})
			}
		}
		data.Scenarios = append(data.Scenarios, runs)
	}
	return rec.close(root, sampler, data, keep, renderES)
}

// runESOnce runs a scenario by a controller in a folder of its own,
// kept with SVCNET_BENCH_KEEP.
func runESOnce(ctx context.Context, root string, impl esImpl, sc esScenario, i int) (esResult, error) {
	dir, err := os.MkdirTemp("", "svcnet-bench-")
	if err != nil {
		return esResult{}, err
	}
	progress("%s with %s (run %d/%d)\n", sc.name, impl.name, i+1, *repeats)
	r, err := runES(ctx, root, dir, impl, sc)
	if err != nil {
		return r, fmt.Errorf("%s, %s: %w", sc.name, impl.name, err)
	}
	if os.Getenv("SVCNET_BENCH_KEEP") == "" {
		_ = os.RemoveAll(dir)
	}
	return r, nil
}

// renderES writes (a) to (d) from their record alone.
func renderES(rec *record[esData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(esTitle))
	fmt.Fprintf(&b, "Each controller runs alone as its own process against a fresh kube-apiserver (bin/k8s; kube-controller-manager %s), "+
		"with --kube-api-qps=%s --kube-api-burst=%s --endpointslice-updates-batch-period=%s, %d Nodes. "+
		"For (a) and (b) the objects exist before the controller starts and the time is from process start to every Service's slices "+
		"holding exactly its ready Pods; for (c) and (d) the time and writes are those of the change, after the initial sync. "+
		"Writes are EndpointSlice creates, updates and deletes seen by a watch. CPU is the process's user+system time for the whole run; RSS its peak. "+
		"Each controller runs each scenario %d times, the controllers alternating; each cell is the median of the runs with the smallest "+
		"and largest, and the ratios are of the medians. %s\n\n",
		rec.Tools["kube-controller-manager"], d.QPS, d.Burst, d.BatchPeriod, d.Nodes, d.Repeats, rec.loadNote())
	b.WriteString("| scenario | controller | time (s) | writes | slices | mean fill | CPU s | peak RSS MiB |\n|---|---|---|---|---|---|---|---|\n")
	for _, sc := range d.Scenarios {
		var meds [2]esMedians
		for k, name := range []string{"svcnet", "kube-controller-manager"} {
			runs := runsWhere(sc.Runs, func(r esRun) bool { return r.Controller == name })
			col := func(f func(esRun) float64) []float64 { return column(runs, f) }
			times, writes, sliceCounts := col(func(r esRun) float64 { return r.Converge.Seconds() }), col(func(r esRun) float64 { return float64(r.Writes) }),
				col(func(r esRun) float64 { return float64(r.Slices) })
			cpu, rss := col(func(r esRun) float64 { return r.CPU }), col(func(r esRun) float64 { return r.RSSMiB })
			fill := col(func(r esRun) float64 { return float64(r.Endpoints) / float64(max(r.Slices, 1)) })
			meds[k] = esMedians{time: median(times), writes: median(writes), slices: median(sliceCounts), cpu: median(cpu), rss: median(rss)}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", sc.Name, name, spreadOf(times, "%.3f"), spreadOf(writes, "%.0f"),
				spreadOf(sliceCounts, "%.0f"), spreadOf(fill, "%.1f"), spreadOf(cpu, "%.2f"), spreadOf(rss, "%.0f"))
		}
		s, u := meds[0], meds[1]
		fmt.Fprintf(&b, "| %s | **svcnet/upstream** | **%.2fx** | **%.2fx** | %.0f vs %.0f | | **%.2fx** | **%.2fx** |\n", sc.Name,
			ratio(s.time, u.time), ratio(s.writes, u.writes), s.slices, u.slices, ratio(s.cpu, u.cpu), ratio(s.rss, u.rss))
	}
	return b.String()
}

// esMedians are one controller's medians in a scenario.
type esMedians struct{ time, writes, slices, cpu, rss float64 }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
