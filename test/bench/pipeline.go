// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

// The end-to-end benchmark (j): `svcnet up --nodes 3` with svcnet's
// pipeline (manager + agents) and with the upstream one (kube-controller-
// manager's EndpointSlice controller + kube-proxy, --pipeline=upstream),
// one after the other on the same machine. Each measures, from the API
// request, the time until a client request through the Service succeeds
// (reaches a new Pod, for a scale-up) and until every node's rules hold
// the new endpoints.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	pipelineNodes   = 3
	pipelineNS      = "bench"
	pipelineTimeout = 30 * time.Second
	// rulePoll is how often every node's rules are read while waiting for
	// a deleted Service's or a scale-down's rules to go (not measured).
	rulePoll = 50 * time.Millisecond
	// settle is the pause before each measured change of a quiet cluster,
	// as a person's commands come. Back to back, the runs drain kube-
	// controller-manager's client rate limiters (20 QPS, burst 30, shared
	// by both pipelines) and kube-proxy's (--iptables-min-sync-period 1s,
	// burst 2): (j3) measures that case apart.
	settle = time.Second
	// requestGap is the pause between two requests of one prober.
	requestGap = 2 * time.Millisecond
	// requestTimeout bounds one request attempt.
	requestTimeout = 50 * time.Millisecond
)

// pipelineSide is one way (j) and (l) run their clusters: a pipeline and
// the settings of its programs.
type pipelineSide struct {
	Name     string `json:"name"`
	Pipeline string `json:"pipeline"`
	// MinSyncPeriod is svcnet up's --min-sync-period, "" for each node
	// proxy's own default.
	MinSyncPeriod string `json:"minSyncPeriod,omitempty"`
	// GOGC is the whole svcnet up's, "" for each program's default.
	GOGC string `json:"gogc,omitempty"`
}

// pipelineSides are the sides of (j) and (l): the first two run the node
// proxies at the same settings, kube-proxy's defaults (a minimum sync
// period of 1 s, Go's collector at GOGC=100), and their ratios are
// computed; the third is svcnet at its own defaults (the agent syncs at
// once and collects at GOGC=50).
var pipelineSides = []pipelineSide{
	{Name: "svcnet, kube-proxy's settings", Pipeline: "svcnet", MinSyncPeriod: "1s", GOGC: "100"},
	{Name: "upstream, its defaults", Pipeline: "upstream"},
	{Name: "svcnet, its defaults", Pipeline: "svcnet"},
}

// pipelineCluster is one cluster's run of (j) and (l).
type pipelineCluster struct {
	Side       string          `json:"side"`
	CreateReq  []time.Duration `json:"createReq"`
	CreateProg []time.Duration `json:"createProg"`
	ScaleReq   []time.Duration `json:"scaleReq"`
	ScaleProg  []time.Duration `json:"scaleProg"`
	BusyReq    []time.Duration `json:"busyReq"`
	BusyProg   []time.Duration `json:"busyProg"`
	// ScaleStages and BusyStages are each scale-up's steps, (j2)'s and
	// (j3)'s.
	ScaleStages []scaleStages `json:"scaleStages"`
	BusyStages  []scaleStages `json:"busyStages"`
	// CPU is the svcnet up process tree's during (j).
	CPU float64   `json:"cpu"`
	DNS dnsResult `json:"dns"`
}

// pipelineData is (j) and (l)'s record.
type pipelineData struct {
	Nodes          int               `json:"nodes"`
	Runs           int               `json:"runs"`
	Repeats        int               `json:"repeats"`
	Settle         time.Duration     `json:"settle"`
	RequestGap     time.Duration     `json:"requestGap"`
	RequestTimeout time.Duration     `json:"requestTimeout"`
	ProbeGap       time.Duration     `json:"probeGap"`
	QPSClients     int               `json:"qpsClients"`
	QPSDuration    time.Duration     `json:"qpsDuration"`
	Sides          []pipelineSide    `json:"sides"`
	Clusters       []pipelineCluster `json:"clusters"`
}

// upCluster is a running `svcnet up`.
type upCluster struct {
	p        *proc
	c        client.Client
	cs       kubernetes.Interface
	nodes    []string // node namespaces
	monitors []*ruleMonitor
	client   string // client namespace
}

var upNamespacesRE = regexp.MustCompile(`\(namespaces (\S+)-node-\*, client (\S+)\)`)

func startUpCluster(ctx context.Context, root, dir string, side pipelineSide) (*upCluster, error) {
	var ports []string
	for range 4 {
		p, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		ports = append(ports, strconv.Itoa(p))
	}
	logPath := filepath.Join(dir, "svcnet-up.log")
	// iptables mode: the benchmark follows each node's rules with `nft
	// monitor rules`, which sees iptables-nft's rules but not nftables
	// mode's map elements.
	argv := []string{filepath.Join(root, "bin/svcnet"), "up", "--nodes", strconv.Itoa(pipelineNodes), "--pipeline", side.Pipeline,
		"--proxy-mode", "iptables", "--data-dir", filepath.Join(dir, "data"), "--k8s-bin-dir", filepath.Join(root, "bin/k8s"),
		"--apiserver-port", ports[0], "--etcd-client-port", ports[1], "--etcd-peer-port", ports[2], "--webhook-port", ports[3]}
	if side.MinSyncPeriod != "" {
		argv = append(argv, "--min-sync-period", side.MinSyncPeriod)
	}
	if side.GOGC != "" {
		argv = append([]string{"env", "GOGC=" + side.GOGC}, argv...)
	}
	p, err := startProc(logPath, argv...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	var m []string
	for {
		b, _ := os.ReadFile(logPath)
		m = upNamespacesRE.FindStringSubmatch(string(b))
		if m != nil && strings.Contains(string(b), "The control plane is up") {
			break
		}
		if p.cmd.ProcessState != nil || time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("svcnet up (%s) not up; its output:\n%s", side.Name, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "data", "kubeconfig"))
	if err != nil {
		p.stop()
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		p.stop()
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		p.stop()
		return nil, err
	}
	u := &upCluster{p: p, c: c, cs: cs, client: m[2]}
	for i := 1; i <= pipelineNodes; i++ {
		ns := fmt.Sprintf("%s-node-%d", m[1], i)
		mon, err := monitorRules(ctx, ns)
		if err != nil {
			u.stop()
			return nil, err
		}
		u.nodes, u.monitors = append(u.nodes, ns), append(u.monitors, mon)
	}
	return u, nil
}

// endpointsInRules counts the KUBE-SEP jumps of a Service's chain in every
// node (-1: no chain), read in parallel.
func (u *upCluster) endpointsInRules(ctx context.Context, svc string) []int {
	chain := iptables.ServiceChain(pipelineNS, svc, "", corev1.ProtocolTCP)
	counts := make([]int, len(u.nodes))
	var wg sync.WaitGroup
	for i, ns := range u.nodes {
		wg.Go(func() {
			counts[i] = -1
			if save, err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path(ns)).Save(ctx, "nat"); err == nil {
				counts[i] = iptables.EndpointJumps(save, chain)
			}
		})
	}
	wg.Wait()
	return counts
}

// waitRules polls until every node's chain for svc has want endpoints (-1:
// no chain) and returns the time since start.
func (u *upCluster) waitRules(ctx context.Context, svc string, want int, start time.Time) (time.Duration, error) {
	for {
		counts := u.endpointsInRules(ctx, svc)
		done := true
		for _, c := range counts {
			done = done && c == want
		}
		if done {
			return time.Since(start), nil
		}
		if time.Since(start) > pipelineTimeout {
			return 0, fmt.Errorf("rules for %s: %v endpoints per node after %s, want %d", svc, counts, pipelineTimeout, want)
		}
		time.Sleep(rulePoll)
	}
}

// waitRequest sends requests from namespace ns until one reaches a Pod
// accepted by ok, and returns the time since start.
func (u *upCluster) waitRequest(ctx context.Context, ns, url string, ok func(pod string) bool, start time.Time) (time.Duration, error) {
	// A SYN that met the Service in a half-programmed state (a REJECT
	// whose ICMP answer does not reach a client outside the nodes) is not
	// answered: a short attempt timeout bounds what that costs.
	hc := netlab.Client(ns, requestTimeout)
	for {
		body, err := netlab.Get(ctx, hc, url)
		if err == nil && ok(strings.TrimSpace(body)) {
			return time.Since(start), nil
		}
		if time.Since(start) > pipelineTimeout {
			return 0, fmt.Errorf("no request to %s from %s succeeded within %s (last: %q, %w)", url, ns, pipelineTimeout, body, err)
		}
		time.Sleep(requestGap)
	}
}

// nodesProgrammed returns the time from start until every node's monitor
// saw a rule added holding all of words.
func (u *upCluster) nodesProgrammed(start time.Time, words ...string) (time.Duration, error) {
	var last time.Time
	for i, m := range u.monitors {
		at, err := m.waitAdded(start, pipelineTimeout, words...)
		if err != nil {
			return 0, fmt.Errorf("node %s: %w", u.nodes[i], err)
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(start), nil
}

// forgetRules drops what the monitors saw before t.
func (u *upCluster) forgetRules(t time.Time) {
	for _, m := range u.monitors {
		m.forget(t)
	}
}

func (u *upCluster) stop() {
	for _, m := range u.monitors {
		m.stop()
	}
	u.p.stop()
}

func (u *upCluster) readyPods(ctx context.Context) (map[string]bool, error) {
	var pods corev1.PodList
	if err := u.c.List(ctx, &pods, client.InNamespace(pipelineNS), client.MatchingLabels{"app": "web"}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				out[p.Name] = true
			}
		}
	}
	return out, nil
}

func (u *upCluster) waitPods(ctx context.Context, n int) (map[string]bool, error) {
	deadline := time.Now().Add(pipelineTimeout)
	for {
		pods, err := u.readyPods(ctx)
		if err == nil && len(pods) == n {
			var all corev1.PodList
			if err := u.c.List(ctx, &all, client.InNamespace(pipelineNS)); err == nil && len(all.Items) == n {
				return pods, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("want %d ready Pods, have %d (%w)", n, len(pods), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (u *upCluster) scale(ctx context.Context, replicas int32) error {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: pipelineNS, Name: "web"}}
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	return u.c.SubResource("scale").Patch(ctx, d, client.RawPatch("application/merge-patch+json", patch))
}

// webPort is where the benchmark's web Pods (serve_hostname) listen: the
// Services' targetPort, and the port of their endpoints.
const webPort = 9376

// webLabels select the benchmark Deployment's Pods.
var webLabels = map[string]string{"app": "web"}

// runPipeline runs (l) and then (j) in a cluster of its own for side.
func runPipeline(ctx context.Context, root string, side pipelineSide, runs int) (pipelineCluster, error) {
	res := pipelineCluster{Side: side.Name}
	dir, err := os.MkdirTemp("", "svcnet-bench-pipeline-")
	if err != nil {
		return res, err
	}
	if os.Getenv("SVCNET_BENCH_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		progress("logs kept in %s\n", dir)
	}
	u, err := startUpCluster(ctx, root, dir, side)
	if err != nil {
		return res, err
	}
	defer u.stop()
	pods, err := u.deployWeb(ctx)
	if err != nil {
		return res, err
	}
	dns, err := u.dnsProber(ctx)
	if err != nil {
		return res, fmt.Errorf("(l): %w", err)
	}
	defer dns.close()
	if err := u.serviceNames(ctx, dns, runs, pods, &res.DNS); err != nil {
		return res, fmt.Errorf("(l): %w", err)
	}
	probe := webService("web")
	if err := u.c.Create(ctx, probe); err != nil {
		return res, err
	}
	if _, err := u.waitRules(ctx, "web", 3, time.Now()); err != nil {
		return res, err
	}
	if err := u.queryRate(ctx, dns, probe, &res.DNS); err != nil {
		return res, fmt.Errorf("(l): %w", err)
	}
	cpuStart := u.p.treeCPUSeconds()
	if err := u.serviceCreates(ctx, runs, pods, &res); err != nil {
		return res, err
	}
	// Scale 3 -> 4: a request reaches the new Pod, every node programmed;
	// then back to 3 (not measured) until the rules and Pods settled.
	// Quiet, then back to back.
	if res.ScaleReq, res.ScaleProg, res.ScaleStages, err = u.scaleUps(ctx, probe, runs, settle); err != nil {
		return res, err
	}
	if res.BusyReq, res.BusyProg, res.BusyStages, err = u.scaleUps(ctx, probe, runs, 0); err != nil {
		return res, err
	}
	res.CPU = u.p.treeCPUSeconds() - cpuStart
	return res, nil
}

func webService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: pipelineNS, Name: name},
		Spec:       corev1.ServiceSpec{Selector: webLabels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(webPort)}}},
	}
}

// deployWeb creates the namespace and a Deployment of 3 web Pods, and
// returns the Pods' names once they run.
func (u *upCluster) deployWeb(ctx context.Context) (map[string]bool, error) {
	if err := u.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pipelineNS}}); err != nil {
		return nil, err
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: pipelineNS, Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(3)),
			Selector: &metav1.LabelSelector{MatchLabels: webLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: webLabels},
				// serve_hostname ignores SIGTERM: without a short grace
				// period each scale-down would wait out the default 30 s
				// before the next measured scale-up could start.
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/serve_hostname",
						Ports: []corev1.ContainerPort{{ContainerPort: webPort}}}}},
			},
		},
	}
	if err := u.c.Create(ctx, dep); err != nil {
		return nil, err
	}
	return u.waitPods(ctx, 3)
}

// serviceCreates measures runs Service creations: a request through the
// new Service, and every node programmed.
func (u *upCluster) serviceCreates(ctx context.Context, runs int, pods map[string]bool, res *pipelineCluster) error {
	for i := range runs {
		name := fmt.Sprintf("s%d", i)
		svc := webService(name)
		time.Sleep(settle)
		start := time.Now()
		u.forgetRules(start)
		if err := u.c.Create(ctx, svc); err != nil {
			return err
		}
		req, err := u.waitRequest(ctx, u.client, "http://"+svc.Spec.ClusterIP+"/", func(p string) bool { return pods[p] }, start)
		if err != nil {
			return fmt.Errorf("creating Service %s: %w", name, err)
		}
		prog, err := u.nodesProgrammed(start, "add rule ip nat KUBE-SERVICES ", "jump "+iptables.ServiceChain(pipelineNS, name, "", corev1.ProtocolTCP)+" ")
		if err != nil {
			return fmt.Errorf("creating Service %s: %w", name, err)
		}
		res.CreateReq, res.CreateProg = append(res.CreateReq, req), append(res.CreateProg, prog)
		if err := u.c.Delete(ctx, svc); err != nil {
			return err
		}
		if _, err := u.waitRules(ctx, name, -1, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

// scaleUps measures runs scale-ups 3 -> 4 of the Deployment behind probe,
// each after pause; each is followed by a scale back to 3 (not measured)
// until the rules and Pods settled.
func (u *upCluster) scaleUps(ctx context.Context, probe *corev1.Service, runs int, pause time.Duration) ([]time.Duration, []time.Duration, []scaleStages, error) {
	var reqs, progs []time.Duration
	var stages []scaleStages
	tracer, err := traceStages(ctx, u.cs, pipelineNS)
	if err != nil {
		return nil, nil, nil, err
	}
	defer tracer.close()
	for range runs {
		before, err := u.waitPods(ctx, 3)
		if err != nil {
			return nil, nil, nil, err
		}
		time.Sleep(pause)
		start := time.Now()
		u.forgetRules(start)
		tracer.forget(start)
		if err := u.scale(ctx, 4); err != nil {
			return nil, nil, nil, err
		}
		var added string
		req, err := u.waitRequest(ctx, u.client, "http://"+probe.Spec.ClusterIP+"/", func(p string) bool {
			if p != "" && !before[p] {
				added = p
				return true
			}
			return false
		}, start)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("scaling to 4: %w", err)
		}
		var pod corev1.Pod
		if err := u.c.Get(ctx, client.ObjectKey{Namespace: pipelineNS, Name: added}, &pod); err != nil {
			return nil, nil, nil, err
		}
		// The Service chain jumps to the new endpoint's chain: the node's
		// rules were rewritten with the 4 endpoints.
		prog, err := u.nodesProgrammed(start, "add rule ip nat "+iptables.ServiceChain(pipelineNS, "web", "", corev1.ProtocolTCP)+" ",
			"jump "+iptables.EndpointChain(pipelineNS, "web", "", corev1.ProtocolTCP, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(webPort)))+" ")
		if err != nil {
			return nil, nil, nil, fmt.Errorf("scaling to 4: %w", err)
		}
		st, err := tracer.stages(start, added, 4, pod.Status.PodIP)
		if err != nil {
			return nil, nil, nil, err
		}
		reqs, progs, stages = append(reqs, req), append(progs, prog), append(stages, st)
		if err := u.scale(ctx, 3); err != nil {
			return nil, nil, nil, err
		}
		if _, err := u.waitRules(ctx, "web", 3, time.Now()); err != nil {
			return nil, nil, nil, err
		}
	}
	return reqs, progs, stages, nil
}

// pipelineReport runs (l) and (j) in *repeats clusters of each
// side, the sides taking turns.
func pipelineReport(ctx context.Context, root string, scale int, skip string, keep bool) (string, error) {
	runs := max(20/scale, 5)
	if skip != "" {
		return fmt.Sprintf("%s\n\nNot run: %s.\n\n%s\n\nNot run: %s.\n", pipelineTitle(pipelineNodes), skip, dnsTitle(pipelineNodes), skip), nil
	}
	rec := newRecord[pipelineData](root, "jl")
	for _, tool := range []string{"kube-proxy", "kube-controller-manager"} {
		rec.Tools[tool] = toolVersion(filepath.Join(root, "bin/k8s", tool))
	}
	rec.Tools["iptables"], rec.Tools["coredns"] = iptablesVersion(), coreDNSVersion(root)
	data := pipelineData{Nodes: pipelineNodes, Runs: runs, Repeats: *repeats, Settle: settle, RequestGap: requestGap,
		RequestTimeout: requestTimeout, ProbeGap: probeGap, QPSClients: qpsClients, QPSDuration: qpsDuration, Sides: pipelineSides}
	sampler := newLoadSampler()
	for i := range *repeats {
		for _, side := range pipelineSides {
			progress("(j, l) %s, cluster %d/%d, %d runs of each measure\n", side.Name, i+1, *repeats, runs)
			r, err := runPipeline(ctx, root, side, runs)
			if err != nil {
				return "", fmt.Errorf("(j, l) %s: %w", side.Name, err)
			}
			data.Clusters = append(data.Clusters, r)
		}
	}
	return rec.close(root, sampler, data, keep, renderPipeline)
}

func pipelineTitle(nodes int) string {
	return fmt.Sprintf("## End to end: svcnet up with %d nodes, svcnet's pipeline vs the upstream one", nodes)
}

// renderPipeline writes (j) and (l) from their record alone.
func renderPipeline(rec *record[pipelineData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(pipelineTitle(d.Nodes)))
	fmt.Fprintf(&b, "Clusters of `svcnet up --nodes %d --proxy-mode=iptables` on the same machine, of three kinds: %s. "+
		"Upstream's pipeline is kube-controller-manager's EndpointSlice controller (%s), kube-apiserver's allocators and kube-proxy "+
		"(%s, iptables mode, %s) in each node; svcnet's is its manager and agents. The first two kinds run the node proxies at the same "+
		"settings, kube-proxy's defaults, and the ratios are theirs; the third is svcnet at its own defaults, where the agent applies a "+
		"change as soon as it arrives and collects garbage at GOGC=50. The node simulator (shared by all) starts each Pod in a network "+
		"namespace of its own. Each kind runs %d clusters, the kinds taking turns; each cluster measures each row %d times.\n\n",
		d.Nodes, pipelineSideList(d.Sides), rec.Tools["kube-controller-manager"], rec.Tools["kube-proxy"], rec.Tools["iptables"], d.Repeats, d.Runs)
	fmt.Fprintf(&b, "(j1) Services created for a Deployment of 3 Pods: from the create request until a request from the client namespace "+
		"through the ClusterIP succeeds, and until every node's rules send the ClusterIP to its Service chain. (j2) scale-ups 3 -> 4 "+
		"(scale subresource, as `kubectl scale`), each %s after the cluster settled from the previous one, as a person's commands come: "+
		"until a client request reaches the new Pod, and until every node's rules jump to its endpoint chain. (j3) the same scale-ups "+
		"back to back, each as soon as the previous scale-down settled. The client sends new connections one after another, %s apart, "+
		"each given %s. Each node's rules are followed with `nft monitor rules` in its namespace: iptables-restore (svcnet's and "+
		"kube-proxy's alike, nf_tables backend) commits a transaction at once and the kernel announces its rules as they land. "+
		"p50 is the median of the clusters' medians with the smallest and largest; slowest is of every run of the kind. %s\n\n",
		d.Settle, d.RequestGap, d.RequestTimeout, rec.loadNote())
	table := pipelineTable(&b, d)
	table("(j1) create Service -> client request succeeds", func(c pipelineCluster) []time.Duration { return c.CreateReq })
	table("(j1) create Service -> every node programmed", func(c pipelineCluster) []time.Duration { return c.CreateProg })
	table("(j2) scale 3 -> 4, quiet -> request reaches the new Pod", func(c pipelineCluster) []time.Duration { return c.ScaleReq })
	table("(j2) scale 3 -> 4, quiet -> all nodes reprogrammed", func(c pipelineCluster) []time.Duration { return c.ScaleProg })
	table("(j3) scale 3 -> 4, back to back -> request reaches the new Pod", func(c pipelineCluster) []time.Duration { return c.BusyReq })
	table("(j3) scale 3 -> 4, back to back -> all nodes reprogrammed", func(c pipelineCluster) []time.Duration { return c.BusyProg })
	writeStageTable(&b, d)
	b.WriteString("\nCPU seconds of the whole `svcnet up` process tree (etcd, kube-apiserver, kube-controller-manager, the manager, the node " +
		"simulator, the agents or kube-proxies, iptables) during (j), a cluster's:")
	for i, side := range d.Sides {
		cpu := column(sideClusters(d, side.Name), func(c pipelineCluster) float64 { return c.CPU })
		fmt.Fprintf(&b, "%s %s %s", map[bool]string{true: "", false: ";"}[i == 0], side.Name, spreadOf(cpu, "%.1f"))
	}
	b.WriteString(".\n\n")
	b.WriteString(renderDNS(rec))
	return b.String()
}

// pipelineSideList says how each side's clusters run.
func pipelineSideList(sides []pipelineSide) string {
	var out []string
	for _, s := range sides {
		how := "`--pipeline=" + s.Pipeline
		if s.MinSyncPeriod != "" {
			how += " --min-sync-period=" + s.MinSyncPeriod
		}
		how += "`"
		if s.GOGC != "" {
			how += " with GOGC=" + s.GOGC + " for every program"
		}
		out = append(out, fmt.Sprintf("%s (%s)", s.Name, how))
	}
	return strings.Join(out, ", ")
}

// sideClusters are the record's clusters of one side.
func sideClusters(d pipelineData, side string) []pipelineCluster {
	return runsWhere(d.Clusters, func(c pipelineCluster) bool { return c.Side == side })
}

// pipelineTable starts a table of a measure's p50 and slowest for each
// side and returns the function that writes one measure's rows, with
// the ratio of the first two sides' p50s.
func pipelineTable(b *strings.Builder, d pipelineData) func(name string, of func(pipelineCluster) []time.Duration) {
	b.WriteString("| measure | clusters | p50 (ms) | slowest (ms) |\n|---|---|---|---|\n")
	return func(name string, of func(pipelineCluster) []time.Duration) {
		var p50 []float64
		for _, side := range d.Sides {
			clusters := sideClusters(d, side.Name)
			p50s := column(clusters, func(c pipelineCluster) float64 { return millis(percentile(of(c), 0.5)) })
			var all []time.Duration
			for _, c := range clusters {
				all = append(all, of(c)...)
			}
			p50 = append(p50, median(p50s))
			fmt.Fprintf(b, "| %s | %s | %s | %.1f (of %d) |\n", name, side.Name, spreadOf(p50s, "%.1f"), millis(slices.Max(all)), len(all))
		}
		fmt.Fprintf(b, "| %s | **%s / %s** | **%.2fx** | |\n", name, d.Sides[0].Name, d.Sides[1].Name, ratio(p50[0], p50[1]))
	}
}

// writeStageTable writes where a scale-up's time goes, each step's p50
// over every scale-up of a side.
func writeStageTable(b *strings.Builder, d pipelineData) {
	b.WriteString("\nWhere a scale-up's time goes, p50 of each step over every scale-up of a kind (from the change seen by a watch in the " +
		"benchmark to the next one; the last step ends when every node's rules hold the new endpoint). The first four steps run the same " +
		"code in every cluster: kube-controller-manager's Deployment and ReplicaSet controllers and svcnet up's node simulator.\n\n| step |")
	for _, j := range []string{"j2", "j3"} {
		for _, side := range d.Sides {
			fmt.Fprintf(b, " (%s) %s |", j, side.Name)
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", 2*len(d.Sides)) + "\n")
	steps := []struct {
		name string
		at   func(scaleStages) time.Duration
	}{
		{"scale request -> ReplicaSet scaled (Deployment controller)", func(st scaleStages) time.Duration { return st.RS }},
		{"-> Pod created (ReplicaSet controller)", func(st scaleStages) time.Duration { return st.Created }},
		{"-> Pod bound to a node (simulated scheduler)", func(st scaleStages) time.Duration { return st.Bound }},
		{"-> Pod Ready (simulated kubelet)", func(st scaleStages) time.Duration { return st.Ready }},
		{"-> EndpointSlice holds it (EndpointSlice controller)", func(st scaleStages) time.Duration { return st.Slice }},
		{"-> every node reprogrammed (node proxies)", nil},
	}
	stepP50 := func(clusters []pipelineCluster, busy bool, i int) string {
		var ds []time.Duration
		for _, c := range clusters {
			sts, progs := c.ScaleStages, c.ScaleProg
			if busy {
				sts, progs = c.BusyStages, c.BusyProg
			}
			for k, st := range sts {
				end := progs[k]
				if steps[i].at != nil {
					end = steps[i].at(st)
				}
				var begin time.Duration
				if i > 0 {
					begin = steps[i-1].at(st)
				}
				ds = append(ds, end-begin)
			}
		}
		return ms(percentile(ds, 0.5))
	}
	for i, st := range steps {
		fmt.Fprintf(b, "| %s |", st.name)
		for _, busy := range []bool{false, true} {
			for _, side := range d.Sides {
				fmt.Fprintf(b, " %s |", stepP50(sideClusters(d, side.Name), busy, i))
			}
		}
		b.WriteString("\n")
	}
}
