// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/monitoring"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	// monitoringNS holds the workload of the monitoring test.
	monitoringNS = "monitoring"
	// monitoringPool is svcnet up's LoadBalancer range in the test: small,
	// so that the test can fill it.
	monitoringPool = "192.168.240.0/28"
	// monitoringNodePorts is the nodePort range: 18 ports, which web, the
	// Services that fill the pool and NodePort Services after them
	// (fillNodePorts) take all but one of.
	monitoringNodePorts      = "30000-30017"
	monitoringNodePortsFirst = 30000
	monitoringNodePortsSize  = 18
	// tenantCIDR is a ServiceCIDR bound to the namespace tenant, which the
	// test fills.
	tenantCIDR = "10.97.0.0/28"
	// upPool and upAnnouncement are the pool and the announcement svcnet
	// up creates for its range.
	upPool         = "svcnet-up"
	upAnnouncement = "svcnet-up"
	// The job names the chart's monitors give the series.
	jobAgents  = "kube-proxy"
	jobManager = "svcnet-manager"
)

// TestUpMonitoring scrapes `svcnet up`'s manager and agents with a real
// Prometheus (make prometheus), as the chart's ServiceMonitor and
// PodMonitor do, with svcnet's rules and kubernetes-mixin's kube-proxy
// alerts loaded. Through a workload and its faults (a full pool, which
// with NodePort Services nearly fills a small nodePort range, a full
// ServiceCIDR bound to a namespace, an announcing node's link cut, an
// announcement that selects no node, an agent stopped) each alert fires in the scenario it
// describes, but SvcnetNodeRulesStale (promtool's cases only: a node's
// syncs cannot be made to fail without touching the host), and every
// query of every shipped dashboard and of kubernetes-mixin's proxy
// dashboard returns data.
//
// The rules are the shipped ones with two changes the test needs: no
// `for` (an alert fires at its first true evaluation), and a failover
// budget of 0.25 s, so that a real L2 move (0.5 to 0.6 s with the
// default flags) exceeds it.
func TestUpMonitoring(t *testing.T) {
	requireNetns(t)
	promDir, err := testenv.ModuleBinDir("prometheus", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	ports := freePorts(t, 2)
	managerMetrics := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--dns=false", "--load-balancer-ip-range="+monitoringPool, "--service-node-port-range="+monitoringNodePorts,
		"--metrics-bind-address="+managerMetrics, "--metrics-secure=false"))
	c := kubeClient(t, dataDir)
	nodes := []string{"node-1", "node-2"}

	prom := startPrometheus(t, filepath.Join(promDir, "prometheus"), ports[1], managerMetrics, forwardAgentMetrics(t, nodes))
	prom.waitTargetsUp(t, 1+len(nodes))
	// Without its `for`, KubeProxyDown fires until the agents' first
	// scrape; the picture starts after.
	waitFor(t, "KubeProxyDown resolved", func() (bool, string) {
		got := prom.firing(t, "KubeProxyDown")
		return len(got) == 0, fmt.Sprint(got)
	})
	start := time.Now()

	t.Log("each agent says it started on its Node, as kube-proxy does")
	for _, n := range nodes {
		waitFor(t, "the Starting Event on "+n, func() (bool, string) {
			var evs corev1.EventList
			if err := c.List(context.Background(), &evs, client.InNamespace(metav1.NamespaceDefault)); err != nil {
				return false, err.Error()
			}
			for _, ev := range evs.Items {
				if ev.Reason == "Starting" && ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == n && ev.ReportingController == "svcnet-agent" {
					return true, ""
				}
			}
			return false, fmt.Sprint(len(evs.Items), " Events")
		})
	}

	t.Log("the workload: a LoadBalancer Service with a Pod on each node, a Service without a selector")
	web := monitoringWorkload(t, c, nodes)
	owner := announcedBy(t, c, web)

	t.Log("fill the pool: one Service more than it has addresses")
	fillPool(t, c, prom)
	fillNodePorts(t, c)
	prom.waitFiring(t, "SvcnetLoadBalancerPoolNearlyFull", map[string]string{"pool": upPool, "job": jobManager})
	prom.waitFiring(t, "SvcnetNodePortRangeNearlyFull", map[string]string{"range": monitoringNodePorts, "job": jobManager})

	t.Log("fill a ServiceCIDR bound to one namespace")
	fillTenantCIDR(t, c, dataDir, prom)
	prom.waitFiring(t, "SvcnetServiceCIDRNearlyFull", map[string]string{"servicecidr": "tenant", "job": jobManager})

	t.Log("Pods come and go: slice writes and network programming on every node")
	churn(t, c, nodes)

	t.Logf("cut the link of %s, which announces %s", owner, web.Status.LoadBalancer.Ingress[0].IP)
	survivor := nodes[0]
	if owner == survivor {
		survivor = nodes[1]
	}
	runIn(t, "svcnet-"+owner, "ip", "link", "set", "eth0", "down")
	prom.waitFiring(t, "SvcnetLoadBalancerFailoverSlow", map[string]string{"instance": survivor, "address": web.Status.LoadBalancer.Ingress[0].IP})
	runIn(t, "svcnet-"+owner, "ip", "link", "set", "eth0", "up")

	t.Log("every query of every dashboard returns data")
	prom.checkDashboards(t)
	for _, quiet := range []string{"SvcnetNodeRulesStale", "SvcnetLoadBalancerUnannounced", "KubeProxyDown", "KubeProxyInstanceUnreachable"} {
		if got := prom.firing(t, quiet); len(got) > 0 {
			t.Errorf("%s fires on a healthy cluster: %v", quiet, got)
		}
	}

	t.Log("no node may announce any more: the announcement selects none")
	selectNoNode(t, dataDir)
	prom.waitFiring(t, "SvcnetLoadBalancerUnannounced", map[string]string{"namespace": monitoringNS, "service": web.Name})

	t.Log("stop the agent of node-2")
	pid := agentPID(t, up, nodes[1])
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	prom.waitFiring(t, "KubeProxyInstanceUnreachable", map[string]string{"instance": nodes[1], "job": jobAgents})

	// A few evaluations of the last alert, so that the picture shows it.
	waitFor(t, "three evaluations of KubeProxyInstanceUnreachable", func() (bool, string) {
		s, err := prom.query(`count_over_time(ALERTS{alertname="KubeProxyInstanceUnreachable", alertstate="firing"}[1m]) >= 3`)
		return err == nil && len(s) > 0, fmt.Sprint(s, err)
	})
	prom.drawMonitoringPicture(t, start)
}

// forwardAgentMetrics makes each node's agent metrics (127.0.0.1:10249
// inside the node, as kube-proxy's) reachable from this process's
// namespace, as a PodMonitor reaches a hostNetwork Pod: one listener per
// node on the loopback here, keyed by node.
func forwardAgentMetrics(t *testing.T, nodes []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		dial := netns.DialContext(netlab.Path("svcnet-" + n))
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer conn.Close()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					up, err := dial(ctx, "tcp", nodeProxyMetrics)
					cancel()
					if err != nil {
						return
					}
					defer up.Close()
					go func() { _, _ = io.Copy(up, conn); up.Close() }()
					_, _ = io.Copy(conn, up)
				}()
			}
		}()
		out[n] = ln.Addr().String()
	}
	return out
}

// nodeProxyMetrics is where a node's proxy serves its metrics inside the
// node (localcluster/up).
const nodeProxyMetrics = "127.0.0.1:10249"

// prometheus is a running Prometheus and its HTTP API.
type prometheus struct {
	url string
}

// startPrometheus runs Prometheus scraping the manager and the agents
// every second, with svcnet's rules (as TestUpMonitoring describes) and
// kubernetes-mixin's kube-proxy alerts.
func startPrometheus(t *testing.T, bin string, port int, manager string, agents map[string]string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	params := monitoring.DefaultParams()
	params.FailoverBudget = 250 * time.Millisecond
	rules, err := monitoring.Rules(params)
	if err != nil {
		t.Fatal(err)
	}
	for g := range rules.Groups {
		for r := range rules.Groups[g].Rules {
			rules.Groups[g].Rules[r].For = ""
		}
	}
	mixin := readMixin(t)
	var mixinRules []monitoring.Rule
	for _, a := range mixin.Alerts {
		mixinRules = append(mixinRules, monitoring.Rule{Alert: a.Alert, Expr: a.Expr})
	}
	rules.Groups = append(rules.Groups, monitoring.RuleGroup{Name: "kubernetes-system-kube-proxy", Rules: mixinRules})
	writeYAML(t, filepath.Join(dir, "rules.yaml"), rules)

	var agentTargets []map[string]any
	for _, n := range slices.Sorted(maps.Keys(agents)) {
		agentTargets = append(agentTargets, map[string]any{"targets": []string{agents[n]}, "labels": map[string]string{"instance": n}})
	}
	config := map[string]any{
		"global":     map[string]any{"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
		"rule_files": []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []map[string]any{
			{"job_name": jobManager, "static_configs": []map[string]any{{"targets": []string{manager}}}},
			{"job_name": jobAgents, "static_configs": agentTargets},
		},
	}
	writeYAML(t, filepath.Join(dir, "prometheus.yml"), config)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("Prometheus' log:\n%s", b)
		}
	})
	p := &prometheus{url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	waitFor(t, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mixinFixture is testdata/kubernetes-mixin-proxy.yaml.
type mixinFixture struct {
	Dashboard []string `json:"dashboard"`
	Alerts    []struct {
		Alert string `json:"alert"`
		Expr  string `json:"expr"`
	} `json:"alerts"`
}

func readMixin(t *testing.T) mixinFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kubernetes-mixin-proxy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f mixinFixture
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// series is one element of an instant vector.
type series struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// api asks Prometheus' HTTP API path with q and decodes the data of a
// query's answer of resultType want into result.
func (p *prometheus) api(path string, q url.Values, want string, result any) error {
	resp, err := http.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err
	}
	if out.Status != "success" {
		return fmt.Errorf("%s: %s", q.Get("query"), out.Error)
	}
	if out.Data.ResultType != want {
		return fmt.Errorf("%s: a %s, not a %s", q.Get("query"), out.Data.ResultType, want)
	}
	return json.Unmarshal(out.Data.Result, result)
}

// query runs an instant query.
func (p *prometheus) query(expr string) ([]series, error) {
	var v []series
	return v, p.api("/api/v1/query", url.Values{"query": {expr}}, "vector", &v)
}

// scalar runs expr, which must give one series, and returns its value
// as a whole number.
func (p *prometheus) scalar(expr string) (int, error) {
	s, err := p.query(expr)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("%s: %d series, want 1", expr, len(s))
	}
	var n int
	_, err = fmt.Sscan(fmt.Sprint(s[0].Value[1]), &n)
	return n, err
}

// waitTargetsUp waits until n targets answer.
func (p *prometheus) waitTargetsUp(t *testing.T, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d targets up", n), func() (bool, string) {
		s, err := p.query("up == 1")
		if err != nil {
			return false, err.Error()
		}
		return len(s) == n, fmt.Sprint(s)
	})
}

// firing returns the labels of the firing alerts named name.
func (p *prometheus) firing(t *testing.T, name string) []map[string]string {
	t.Helper()
	s, err := p.query(fmt.Sprintf("ALERTS{alertname=%q, alertstate=\"firing\"}", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, e := range s {
		out = append(out, e.Metric)
	}
	return out
}

// waitFiring waits for alert name to fire with (at least) labels.
func (p *prometheus) waitFiring(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s firing for %v", name, labels), func() (bool, string) {
		got := p.firing(t, name)
		for _, l := range got {
			match := true
			for k, v := range labels {
				match = match && l[k] == v
			}
			if match {
				return true, ""
			}
		}
		return false, fmt.Sprint(got)
	})
	t.Logf("%s fires for %v", name, labels)
}

// dashboardVariables are the values Grafana gives the variables the
// dashboards' queries use: every node ($instance's All), no cluster label
// (kubernetes-mixin's single-cluster default), Grafana's rate interval
// for a 1 s scrape, and a dashboard range that holds the whole test.
var dashboardVariables = strings.NewReplacer(
	"$__rate_interval", "1m", "$__range", "1h", "$instance", ".+", "$cluster", "")

// checkDashboards runs every query of the shipped dashboards and of
// kubernetes-mixin's proxy dashboard, and fails for each that returns no
// series.
func (p *prometheus) checkDashboards(t *testing.T) {
	t.Helper()
	queries := map[string][]string{"kubernetes-mixin proxy": readMixin(t).Dashboard}
	dashboards, err := monitoring.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dashboards {
		b, err := json.Marshal(d.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		queries[d.File] = dashboardExprs(t, b)
	}
	checked := 0
	for _, name := range slices.Sorted(maps.Keys(queries)) {
		for _, q := range queries[name] {
			expr := dashboardVariables.Replace(q)
			s, err := p.query(expr)
			checked++
			switch {
			case err != nil:
				t.Errorf("%s: %v", name, err)
			case len(s) == 0:
				t.Errorf("%s: no data for %s", name, expr)
			}
		}
	}
	t.Logf("%d dashboard queries checked", checked)
}

// dashboardExprs returns the expr of every target of every panel of a
// dashboard's JSON.
func dashboardExprs(t *testing.T, dashboardJSON []byte) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	sort.Strings(out)
	return out
}

// monitoringWorkload creates the namespace, a LoadBalancer Service "web"
// with a Pod on each node, and a Service without a selector whose
// Endpoints the mirroring controller mirrors; it returns web once it has
// its address.
func monitoringWorkload(t *testing.T, c client.Client, nodes []string) *corev1.Service {
	t.Helper()
	ctx := context.Background()
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: "web"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(9376)}}}}
	external := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: "external"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	endpoints := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: "external"}, Subsets: []corev1.EndpointSubset{{ //nolint:staticcheck // the mirroring controller's input
		Addresses: []corev1.EndpointAddress{{IP: "10.244.200.10"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 80}}}}}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monitoringNS}}, web, external, endpoints}
	for _, n := range nodes {
		objs = append(objs, webPod("web-"+n, n))
	}
	for _, o := range objs {
		must(t, c.Create(ctx, o))
	}
	waitFor(t, "web's LoadBalancer address", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(web), web); err != nil {
			return false, err.Error()
		}
		return len(web.Status.LoadBalancer.Ingress) > 0, fmt.Sprint(web.Status.LoadBalancer)
	})
	return web
}

func webPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: hostnameImage}}}}
}

// announcedBy waits for a node to announce svc's address and returns it.
func announcedBy(t *testing.T, c client.Client, svc *corev1.Service) string {
	t.Helper()
	var node string
	waitFor(t, svc.Name+" announced", func() (bool, string) {
		var got corev1.Service
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(svc), &got); err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			// "<ip> answered by <node> (ARP on eth0)"
			if f := strings.Fields(cond.Message); cond.Type == svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced &&
				cond.Status == metav1.ConditionTrue && len(f) >= 4 {
				node = f[3]
				return true, ""
			}
		}
		return false, fmt.Sprint(got.Status.Conditions)
	})
	return node
}

// fillPool creates LoadBalancer Services without endpoints until the
// pool has no address left, and one more, which stays pending.
func fillPool(t *testing.T, c client.Client, prom *prometheus) {
	t.Helper()
	ctx := context.Background()
	var capacity, allocated, held int
	// The pool's free addresses, once the scraped allocation agrees with
	// the Services that hold an address: a scrape taken while the
	// allocation moved would fill the pool with one Service too few or too
	// many, and then the nodePort range would not be as nearly full as the
	// test means it.
	waitFor(t, "the pool's allocation scraped as the Services hold it", func() (bool, string) {
		var err error
		if capacity, err = prom.scalar(fmt.Sprintf("svcnet_loadbalancer_pool_capacity{pool=%q}", upPool)); err != nil {
			return false, err.Error()
		}
		if allocated, err = prom.scalar(fmt.Sprintf("svcnet_loadbalancer_pool_allocated{pool=%q}", upPool)); err != nil {
			return false, err.Error()
		}
		var list corev1.ServiceList
		if err := c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		held = 0
		for _, svc := range list.Items {
			held += len(svc.Status.LoadBalancer.Ingress)
		}
		return allocated == held, fmt.Sprintf("capacity %d, allocated %d, %d addresses held by Services", capacity, allocated, held)
	})
	free := capacity - allocated
	t.Logf("the pool: capacity %d, %d held; %d Services to fill it and one more", capacity, allocated, free)
	for i := range free + 1 {
		must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: fmt.Sprintf("fill-%d", i)}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}))
	}
}

// fillNodePorts creates NodePort Services until the nodePort range has
// one port left.
func fillNodePorts(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	var list corev1.ServiceList
	must(t, c.List(ctx, &list))
	used := 0
	for _, svc := range list.Items {
		for _, p := range svc.Spec.Ports {
			if p.NodePort >= monitoringNodePortsFirst && p.NodePort < monitoringNodePortsFirst+monitoringNodePortsSize {
				used++
			}
		}
		if svc.Spec.HealthCheckNodePort != 0 {
			used++
		}
	}
	t.Logf("the nodePort range: %d of %d ports held; %d NodePort Services to leave one", used, monitoringNodePortsSize, monitoringNodePortsSize-1-used)
	for i := range monitoringNodePortsSize - 1 - used {
		must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: monitoringNS, Name: fmt.Sprintf("nodeport-%d", i)}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}))
	}
}

// fillTenantCIDR binds a small ServiceCIDR to the namespace tenant and
// creates Services there until one address is left.
func fillTenantCIDR(t *testing.T, c client.Client, dataDir string, prom *prometheus) {
	t.Helper()
	ctx := context.Background()
	objects := fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: ServiceCIDR
metadata: {name: tenant}
spec: {cidrs: [%q]}
---
apiVersion: networking.svcnet.io/v1alpha1
kind: ServiceCIDRBinding
metadata: {name: tenant}
spec:
  serviceCIDRName: tenant
  namespaceSelector: {matchLabels: {svcnet.io/tenant: "yes"}}
  exclusive: true
`, tenantCIDR)
	path := filepath.Join(t.TempDir(), "tenant.yaml")
	must(t, os.WriteFile(path, []byte(objects), 0o644))
	if out, errOut, err := kubectl(t, dataDir, "apply", "-f", path); err != nil {
		t.Fatalf("kubectl apply: %v\n%s%s", err, out, errOut)
	}
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Labels: map[string]string{"svcnet.io/tenant": "yes"}}}))
	var free int
	waitFor(t, "the tenant ServiceCIDR's free addresses", func() (bool, string) {
		var err error
		free, err = prom.scalar(`svcnet_clusterip_cidr_available{servicecidr="tenant"}`)
		return err == nil && free > 1, fmt.Sprint(free, err)
	})
	for i := range free - 1 {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("svc-%d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		must(t, c.Create(ctx, svc))
		if p, err := netip.ParsePrefix(tenantCIDR); err != nil || !p.Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) {
			t.Fatalf("Service %s in the bound namespace got ClusterIP %s, outside %s", svc.Name, svc.Spec.ClusterIP, tenantCIDR)
		}
	}
}

// churn replaces each node's web Pod, so that slices change and every
// node programs the changes.
func churn(t *testing.T, c client.Client, nodes []string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		must(t, c.Delete(ctx, webPod("web-"+n, n)))
		must(t, c.Create(ctx, webPod("web-"+n+"-b", n)))
	}
	waitFor(t, "the new web Pods ready", func() (bool, string) {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(monitoringNS)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if strings.HasSuffix(p.Name, "-b") && podReady(&p) {
				ready++
			}
		}
		return ready == len(nodes), fmt.Sprintf("%d ready", ready)
	})
}

// selectNoNode sets svcnet up's announcement to select no node, as
// people do with kubectl.
func selectNoNode(t *testing.T, dataDir string) {
	t.Helper()
	if out, errOut, err := kubectl(t, dataDir, "patch", "loadbalancerannouncement", upAnnouncement, "--type=merge",
		"-p", `{"spec":{"nodeSelector":{"matchLabels":{"svcnet.io/test":"no-such-node"}}}}`); err != nil {
		t.Fatalf("kubectl patch loadbalancerannouncement: %v\n%s%s", err, out, errOut)
	}
}

// runIn runs a command inside network namespace ns.
func runIn(t *testing.T, ns string, argv ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v\n%s", strings.Join(argv, " "), ns, err, out)
	}
}
