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
	"os"
	"path/filepath"
	"regexp"
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

type pipelineResult struct {
	createReq, createProg, scaleReq, scaleProg, busyReq, busyProg []time.Duration
	scaleStages, busyStages                                       []scaleStages
	cpu                                                           float64
	dns                                                           dnsResult
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

func startUpCluster(ctx context.Context, root, dir, pipeline string) (*upCluster, error) {
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
	p, err := startProc(logPath, filepath.Join(root, "bin/svcnet"), "up", "--nodes", strconv.Itoa(pipelineNodes), "--pipeline", pipeline,
		"--proxy-mode", "iptables", "--data-dir", filepath.Join(dir, "data"), "--k8s-bin-dir", filepath.Join(root, "bin/k8s"),
		"--apiserver-port", ports[0], "--etcd-client-port", ports[1], "--etcd-peer-port", ports[2], "--webhook-port", ports[3])
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
			return nil, fmt.Errorf("svcnet up --pipeline=%s not up; its output:\n%s", pipeline, b)
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

// webLabels select the benchmark Deployment's Pods.
var webLabels = map[string]string{"app": "web"}

// runPipeline measures one pipeline in its own `svcnet up`: for (j),
// Service creation, then scale-ups on a quiet cluster and back to back;
// for (l), cluster DNS.
func runPipeline(ctx context.Context, root, pipeline string, runs int, only string) (pipelineResult, error) {
	var res pipelineResult
	dir, err := os.MkdirTemp("", "svcnet-bench-pipeline-")
	if err != nil {
		return res, err
	}
	if os.Getenv("SVCNET_BENCH_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		progress("logs kept in %s\n", dir)
	}
	u, err := startUpCluster(ctx, root, dir, pipeline)
	if err != nil {
		return res, err
	}
	defer u.stop()
	pods, err := u.deployWeb(ctx)
	if err != nil {
		return res, err
	}
	var dns *dnsProber
	if selected(only, "l") {
		if dns, err = u.dnsProber(ctx); err != nil {
			return res, fmt.Errorf("(l): %w", err)
		}
		defer dns.close()
		if err := u.serviceNames(ctx, dns, runs, pods, &res.dns); err != nil {
			return res, fmt.Errorf("(l): %w", err)
		}
	}
	probe := webService("web")
	if err := u.c.Create(ctx, probe); err != nil {
		return res, err
	}
	if _, err := u.waitRules(ctx, "web", 3, time.Now()); err != nil {
		return res, err
	}
	if selected(only, "l") {
		if err := u.queryRate(ctx, dns, probe, &res.dns); err != nil {
			return res, fmt.Errorf("(l): %w", err)
		}
	}
	if !selected(only, "j") {
		return res, nil
	}
	cpuStart := u.p.treeCPUSeconds()
	if err := u.serviceCreates(ctx, runs, pods, &res); err != nil {
		return res, err
	}
	// Scale 3 -> 4: a request reaches the new Pod, every node programmed;
	// then back to 3 (not measured) until the rules and Pods settled.
	// Quiet, then back to back.
	if res.scaleReq, res.scaleProg, res.scaleStages, err = u.scaleUps(ctx, probe, runs, settle); err != nil {
		return res, err
	}
	if res.busyReq, res.busyProg, res.busyStages, err = u.scaleUps(ctx, probe, runs, 0); err != nil {
		return res, err
	}
	res.cpu = u.p.treeCPUSeconds() - cpuStart
	return res, nil
}

func webService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: pipelineNS, Name: name},
		Spec:       corev1.ServiceSpec{Selector: webLabels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}}},
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
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/serve_hostname",
					Ports: []corev1.ContainerPort{{ContainerPort: 9376}}}}},
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
func (u *upCluster) serviceCreates(ctx context.Context, runs int, pods map[string]bool, res *pipelineResult) error {
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
		res.createReq, res.createProg = append(res.createReq, req), append(res.createProg, prog)
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
			"jump "+iptables.EndpointChain(pipelineNS, "web", "", corev1.ProtocolTCP, pod.Status.PodIP+":80")+" ")
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

// pipelineReport runs (j) and (l) for both pipelines, in one `svcnet up`
// per pipeline.
func pipelineReport(ctx context.Context, root string, scale int, only, skip string) (string, error) {
	runs := max(50/scale, 5)
	if skip != "" {
		var b strings.Builder
		if selected(only, "j") {
			writePipelineIntro(&b, runs)
		}
		if selected(only, "l") {
			writeDNSHeading(&b)
		}
		fmt.Fprintf(&b, "Not run: %s.\n", skip)
		return b.String(), nil
	}
	results := map[string]pipelineResult{}
	for _, p := range []string{"svcnet", "upstream"} {
		progress("(j, l) svcnet up --pipeline=%s, %d runs each\n", p, runs)
		r, err := runPipeline(ctx, root, p, runs, only)
		if err != nil {
			return "", fmt.Errorf("pipeline %s: %w", p, err)
		}
		results[p] = r
	}
	var b strings.Builder
	if selected(only, "j") {
		writePipelineIntro(&b, runs)
		writePipelineReport(&b, results["svcnet"], results["upstream"])
	}
	if selected(only, "l") {
		if selected(only, "j") {
			b.WriteString("\n")
		}
		writeDNSReport(&b, root, runs, results["svcnet"].dns, results["upstream"].dns)
	}
	return b.String(), nil
}

// writePipelineIntro says what (j) measures.
func writePipelineIntro(b *strings.Builder, runs int) {
	fmt.Fprintf(b, "## End to end: svcnet up with %d nodes, svcnet's pipeline vs the upstream one\n\n", pipelineNodes)
	fmt.Fprintf(b, "`svcnet up --nodes %d --proxy-mode=iptables` with svcnet's manager and agents, then `--pipeline=upstream` (kube-controller-manager's "+
		"EndpointSlice controller, kube-apiserver's allocator and kube-proxy %s at its defaults in each node), on the same machine. "+
		"The node simulator (shared by both) starts each Pod in a network namespace of its own. (j1) %d Services created for a "+
		"Deployment of 3 Pods: from the create request until a request from the client namespace through the ClusterIP succeeds, "+
		"and until every node's rules send the ClusterIP to its Service chain. (j2) %d scale-ups 3 -> 4 (scale subresource, as `kubectl scale`), "+
		"each %s after the cluster settled from the previous one, as a person's commands come: until a client request reaches the new Pod, "+
		"and until every node's rules jump to its endpoint chain. (j3) the same %d scale-ups back to back, each as soon as the previous "+
		"scale-down settled (about two changes a second, a busy cluster). The client sends new connections one after another, %s apart, "+
		"each given %s. Each node's rules are followed with `nft monitor rules` in its namespace: iptables-restore (svcnet's and "+
		"kube-proxy's alike, nf_tables backend) commits a transaction at once and the kernel announces its rules as they land, so "+
		"watching adds no load, where probing every node with requests or reading its rules with iptables would slow what is measured.\n\n", pipelineNodes, iptablesVersion(), runs, runs, settle, runs, requestGap, requestTimeout)
}

// pipelineTable starts a table of p50 and p99 for both pipelines and
// returns the function that writes one measure's row.
func pipelineTable(b *strings.Builder) func(name string, s, u []time.Duration) {
	fmt.Fprintf(b, "| measure | svcnet p50 | svcnet p99 | upstream p50 | upstream p99 | svcnet / upstream p50 | p99 |\n|---|---|---|---|---|---|---|\n")
	return func(name string, s, u []time.Duration) {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | **%.2fx** | **%.2fx** |\n", name,
			ms(percentile(s, 0.5)), ms(percentile(s, 0.99)), ms(percentile(u, 0.5)), ms(percentile(u, 0.99)),
			ratio(percentile(s, 0.5).Seconds(), percentile(u, 0.5).Seconds()), ratio(percentile(s, 0.99).Seconds(), percentile(u, 0.99).Seconds()))
	}
}

// writePipelineReport writes (j)'s tables.
func writePipelineReport(b *strings.Builder, s, u pipelineResult) {
	row := pipelineTable(b)
	row("(j1) create Service -> client request succeeds", s.createReq, u.createReq)
	row("(j1) create Service -> every node programmed", s.createProg, u.createProg)
	row("(j2) scale 3 -> 4, quiet -> request reaches the new Pod", s.scaleReq, u.scaleReq)
	row("(j2) scale 3 -> 4, quiet -> all nodes reprogrammed", s.scaleProg, u.scaleProg)
	row("(j3) scale 3 -> 4, back to back -> request reaches the new Pod", s.busyReq, u.busyReq)
	row("(j3) scale 3 -> 4, back to back -> all nodes reprogrammed", s.busyProg, u.busyProg)
	fmt.Fprintf(b, "\nWhere a scale-up's time goes, p50 of each step (from the change seen by a watch in the benchmark to the next one; "+
		"the last step ends when every node's rules hold the new endpoint). The first four steps run the same code in both pipelines: "+
		"kube-controller-manager's Deployment and ReplicaSet controllers and svcnet up's node simulator.\n\n")
	fmt.Fprintf(b, "| step | (j2) svcnet | (j2) upstream | (j3) svcnet | (j3) upstream |\n|---|---|---|---|---|\n")
	steps := []struct {
		name string
		at   func(scaleStages) time.Duration
	}{
		{"scale request -> ReplicaSet scaled (Deployment controller)", func(st scaleStages) time.Duration { return st.rs }},
		{"-> Pod created (ReplicaSet controller)", func(st scaleStages) time.Duration { return st.created }},
		{"-> Pod bound to a node (simulated scheduler)", func(st scaleStages) time.Duration { return st.bound }},
		{"-> Pod Ready (simulated kubelet)", func(st scaleStages) time.Duration { return st.ready }},
		{"-> EndpointSlice holds it (EndpointSlice controller)", func(st scaleStages) time.Duration { return st.slice }},
		{"-> every node reprogrammed (node proxies)", nil},
	}
	stepMedian := func(sts []scaleStages, progs []time.Duration, i int) string {
		var ds []time.Duration
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
		return ms(percentile(ds, 0.5))
	}
	for i, st := range steps {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", st.name,
			stepMedian(s.scaleStages, s.scaleProg, i), stepMedian(u.scaleStages, u.scaleProg, i),
			stepMedian(s.busyStages, s.busyProg, i), stepMedian(u.busyStages, u.busyProg, i))
	}
	fmt.Fprintf(b, "\nCPU seconds of the whole `svcnet up` process tree (etcd, kube-apiserver, kube-controller-manager, the manager, the node simulator, the agents or kube-proxies, iptables) during the runs: svcnet %.1f, upstream %.1f.\n", s.cpu, u.cpu)
}
