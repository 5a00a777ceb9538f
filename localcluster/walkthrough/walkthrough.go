// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package walkthrough is `svcnet up --demo`: real kubectl commands against
// the control plane, real iptables-save in the node namespaces, real
// requests from the client namespace, through a Deployment, every Service
// type, scaling and cluster DNS. Each step checks what it shows and fails
// otherwise.
package walkthrough

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// Cluster is what the walkthrough uses of the simulated cluster.
type Cluster struct {
	// Out receives each step, its commands and their output.
	Out io.Writer
	// BinDir holds kubectl; Kubeconfig is the admin's kubeconfig it uses.
	BinDir, Kubeconfig string
	// Client is the admin's client of the API server.
	Client client.Client
	// ClientNetNS is the client namespace, outside the nodes, where the
	// requests and lookups are made.
	ClientNetNS string
	// Nodes are the simulated nodes, whose rules the walkthrough reads.
	Nodes []Node
	// Mode is the nodes' dataplane mode: agent.ModeIPTables or
	// agent.ModeNFTables.
	Mode string
	// KubeProxy: kube-proxy programs the nodes (--pipeline=upstream), not
	// svcnet's agent.
	KubeProxy bool
	// DNSIP is kube-dns's address; invalid without cluster DNS, whose
	// steps are then left out.
	DNSIP netip.Addr
}

// Node is a simulated node as the walkthrough uses it.
type Node struct {
	// Name is the Node object's name.
	Name string
	// NetNS is the node's network namespace.
	NetNS string
	// IP is the node's address on the fabric.
	IP netip.Addr
}

// demoNamespace holds the walkthrough's objects; it is recreated on every
// run.
const demoNamespace = "demo"

// demo is one run of the walkthrough.
type demo struct {
	out     io.Writer
	kubectl string
	env     []string
	c       client.Client
	cl      *Cluster
	http    *http.Client
	steps   int
}

// demoImage answers every request with the Pod's name (on 9376), as in
// the Kubernetes docs' "Debug Services": requests show which Pod they
// reached.
const demoImage = "registry.k8s.io/serve_hostname"

// Run runs the walkthrough on cl, printing each command and its output,
// and fails at the first step whose output is not what it shows.
func Run(ctx context.Context, cl Cluster) error {
	out := cl.Out
	d := &demo{
		out: out, kubectl: filepath.Join(cl.BinDir, "kubectl"), c: cl.Client, cl: &cl,
		env:  append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig),
		http: netlab.Client(cl.ClientNetNS, 2*time.Second),
	}
	if _, err := os.Stat(d.kubectl); err != nil {
		return fmt.Errorf("the walkthrough runs kubectl from %s: %w", cl.BinDir, err)
	}
	fmt.Fprintf(out, "\n===== The walkthrough (namespace %s) =====\n", demoNamespace)
	if err := d.freshNamespace(ctx); err != nil {
		return err
	}
	steps := []func(context.Context) error{d.clusterIP, d.scale, d.nodePort, d.headless, d.externalName, d.loadBalancer}
	if cl.DNSIP.IsValid() {
		steps = slices.Insert(steps, 1, d.byName)
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\n===== Walkthrough complete: every step above was checked. svcnet keeps running; explore with the commands above. =====\n")
	return nil
}

func (d *demo) title(s string) {
	d.steps++
	fmt.Fprintf(d.out, "\n--- %d. %s\n", d.steps, s)
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "    "+format+"\n", args...)
}

// show prints a command and its output, indented.
func (d *demo) show(cmd, output string) {
	fmt.Fprintf(d.out, "$ %s\n", cmd)
	for _, l := range strings.Split(strings.TrimRight(output, "\n"), "\n") {
		if l != "" {
			fmt.Fprintf(d.out, "  %s\n", l)
		}
	}
}

// k runs kubectl in the demo namespace and shows it.
func (d *demo) k(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"-n", demoNamespace}, args...)
	cmd := exec.CommandContext(ctx, d.kubectl, args...)
	cmd.Env = d.env
	b, err := cmd.CombinedOutput()
	d.show("kubectl "+strings.Join(args, " "), string(b))
	if err != nil {
		return string(b), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return string(b), nil
}

// inNode runs a shell pipeline in a node's namespace and shows it.
func (d *demo) inNode(ctx context.Context, netns, pipeline string) string {
	b, _ := exec.CommandContext(ctx, "ip", "netns", "exec", netns, "sh", "-c", pipeline).CombinedOutput()
	d.show(fmt.Sprintf("ip netns exec %s sh -c '%s'", netns, pipeline), string(b))
	return string(b)
}

// resolve looks name up from the client namespace as a program there
// would (getent: the C library's resolver, through cluster DNS) and
// returns the addresses, silently.
func (d *demo) resolve(ctx context.Context, name string) ([]string, string) {
	b, _ := exec.CommandContext(ctx, "ip", "netns", "exec", d.cl.ClientNetNS, "getent", "hosts", name).CombinedOutput()
	var addrs []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && !slices.Contains(addrs, f[0]) {
			addrs = append(addrs, f[0])
		}
	}
	slices.Sort(addrs)
	return addrs, string(b)
}

// waitResolve waits until name resolves to exactly want from the client
// and shows the lookup.
func (d *demo) waitResolve(ctx context.Context, name string, want []string, timeout time.Duration) error {
	slices.Sort(want)
	var got []string
	var out string
	err := controlplane.WaitFor(ctx, timeout, fmt.Sprintf("%s to resolve to %v", name, want), func() (bool, error) {
		got, out = d.resolve(ctx, name)
		return slices.Equal(got, want), nil
	})
	d.show(fmt.Sprintf("ip netns exec %s getent hosts %s", d.cl.ClientNetNS, name), out)
	if err != nil {
		return fmt.Errorf("%w (last answer: %v)", err, got)
	}
	return nil
}

func (d *demo) freshNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{}
	ns.Name = demoNamespace
	if err := d.c.Delete(ctx, ns); err == nil {
		fmt.Fprintf(d.out, "(removing the namespace %s left by an earlier walkthrough)\n", demoNamespace)
	}
	err := controlplane.WaitFor(ctx, 120*time.Second, "namespace "+demoNamespace+" to be gone", func() (bool, error) {
		err := d.c.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		return err
	}
	return d.c.Create(ctx, &corev1.Namespace{ObjectMeta: ns.ObjectMeta})
}

func (d *demo) service(ctx context.Context, name string) (*corev1.Service, error) {
	var svc corev1.Service
	err := d.c.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: name}, &svc)
	return &svc, err
}

// readyEndpoints counts the ready addresses published for a Service.
func (d *demo) readyEndpoints(ctx context.Context, name string) (int, error) {
	var list discoveryv1.EndpointSliceList
	if err := d.c.List(ctx, &list, client.InNamespace(demoNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n += len(e.Addresses)
			}
		}
	}
	return n, nil
}

// endpointsInRules counts the endpoints every node's rules give a
// Service's port (-1: none), read in parallel.
func (d *demo) endpointsInRules(ctx context.Context, name string) []int {
	counts := make([]int, len(d.cl.Nodes))
	var svc corev1.Service
	if err := d.c.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: name}, &svc); err != nil {
		for i := range counts {
			counts[i] = -1
		}
		return counts
	}
	var wg sync.WaitGroup
	for i, n := range d.cl.Nodes {
		wg.Go(func() {
			counts[i] = -1
			if rules, err := d.cl.nodeRules(ctx, n.NetNS); err == nil {
				counts[i] = d.cl.endpointCount(rules, &svc)
			}
		})
	}
	wg.Wait()
	return counts
}

func allEqual(counts []int, want int) bool {
	for _, c := range counts {
		if c != want {
			return false
		}
	}
	return len(counts) > 0
}

// tally sends requests to url from the client namespace until want
// distinct Pods answered (at least n requests, at most 20x n), and shows
// the answers as `sort | uniq -c` would.
func (d *demo) tally(ctx context.Context, url string, n, want int) (map[string]int, error) {
	seen := map[string]int{}
	var errs int
	for i := 0; i < 20*n && (i < n || len(seen) < want); i++ {
		body, err := netlab.Get(ctx, d.http, url)
		if err != nil {
			errs++
			continue
		}
		seen[strings.TrimSpace(body)]++
	}
	total := 0
	for _, c := range seen {
		total += c
	}
	var lines []string
	for _, pod := range slices.Sorted(maps.Keys(seen)) {
		lines = append(lines, fmt.Sprintf("%4d %s", seen[pod], pod))
	}
	d.show(fmt.Sprintf("for i in $(seq %d); do ip netns exec %s curl -s %s; done | sort | uniq -c", total+errs, d.cl.ClientNetNS, url), strings.Join(lines, "\n"))
	if errs > 0 {
		return seen, fmt.Errorf("%d of %d requests to %s failed", errs, total+errs, url)
	}
	if len(seen) < want {
		return seen, fmt.Errorf("requests to %s reached %d Pods, want %d", url, len(seen), want)
	}
	return seen, nil
}

func (d *demo) clusterIP(ctx context.Context) error {
	d.title("A Deployment of 3 Pods and a ClusterIP Service")
	if _, err := d.k(ctx, "create", "deployment", "web", "--image="+demoImage, "--replicas=3", "--port=9376"); err != nil {
		return err
	}
	if _, err := d.k(ctx, "expose", "deployment", "web", "--port=80", "--target-port=9376"); err != nil {
		return err
	}
	if _, err := d.k(ctx, "rollout", "status", "deployment/web", "--timeout=90s"); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "pods", "-o", "wide"); err != nil {
		return err
	}
	svc, err := d.service(ctx, "web")
	if err != nil {
		return err
	}

	d.title("The ClusterIP is an IPAddress object whose parent is the Service")
	out, err := d.k(ctx, "get", "ipaddresses")
	if err != nil {
		return err
	}
	if !strings.Contains(out, svc.Spec.ClusterIP) || !strings.Contains(out, "services/"+demoNamespace+"/web") {
		return fmt.Errorf("kubectl get ipaddresses does not show %s with parent services/%s/web", svc.Spec.ClusterIP, demoNamespace)
	}

	d.title("The EndpointSlice lists the 3 Pod IPs")
	if err := controlplane.WaitFor(ctx, 30*time.Second, "3 ready endpoints of web", func() (bool, error) {
		n, err := d.readyEndpoints(ctx, "web")
		return n == 3, err
	}); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "endpointslices", "-l", "kubernetes.io/service-name=web"); err != nil {
		return err
	}

	d.title("Every node's " + d.cl.Mode + " rules send web's cluster IP to its 3 Pods (DNAT)")
	if err := controlplane.WaitFor(ctx, 30*time.Second, "web's rules on every node", func() (bool, error) {
		return allEqual(d.endpointsInRules(ctx, "web"), 3), nil
	}); err != nil {
		return err
	}
	view, wants := d.cl.serviceRulesView(svc, 3)
	rules := d.inNode(ctx, d.cl.Nodes[0].NetNS, view)
	for _, want := range wants {
		if !strings.Contains(rules, want) {
			return fmt.Errorf("the node's rules for demo/web lack %q", want)
		}
	}

	d.title("Requests from the client namespace reach all 3 Pods")
	_, err = d.tally(ctx, httpURL(svc.Spec.ClusterIP), 30, 3)
	return err
}

func (d *demo) byName(ctx context.Context) error {
	d.title("Cluster DNS: web's name resolves to its ClusterIP, and curl by name reaches a Pod")
	d.say("CoreDNS runs as 2 Pods of kube-system behind kube-dns %s, itself a Service programmed like any other", d.cl.DNSIP)
	if err := addons.WaitDNS(ctx, d.c, addons.DNSReadyTimeout); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "pods", "--namespace=kube-system", "-l", "k8s-app=kube-dns", "-o", "wide"); err != nil {
		return err
	}
	svc, err := d.service(ctx, "web")
	if err != nil {
		return err
	}
	d.say("the client resolves like a Pod of namespace default (search default.svc.%s ...): the demo's Services are <name>.%s, a Service of default is just <name>", addons.ClusterDomain, demoNamespace)
	if err := d.waitResolve(ctx, "web."+demoNamespace, []string{svc.Spec.ClusterIP}, 60*time.Second); err != nil {
		return err
	}
	url := "http://web." + demoNamespace + "/"
	b, err := exec.CommandContext(ctx, "ip", "netns", "exec", d.cl.ClientNetNS, "curl", "-s", "--max-time", "5", url).CombinedOutput()
	d.show(fmt.Sprintf("ip netns exec %s curl -s %s", d.cl.ClientNetNS, url), string(b))
	if err != nil {
		return fmt.Errorf("curl %s from the client: %w: %s", url, err, b)
	}
	if !strings.HasPrefix(string(b), "web-") {
		return fmt.Errorf("curl %s from the client answered %q, not a Pod of web", url, b)
	}
	return nil
}

// podIPs are the addresses of the Ready Pods of the demo's Deployment.
func (d *demo) podIPs(ctx context.Context) ([]string, error) {
	var pods corev1.PodList
	if err := d.c.List(ctx, &pods, client.InNamespace(demoNamespace), client.MatchingLabels{"app": "web"}); err != nil {
		return nil, err
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.PodIP != "" && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips, nil
}

func (d *demo) scale(ctx context.Context) error {
	d.title("Scale to 10: the slice and every node's rules follow")
	start := time.Now()
	if _, err := d.k(ctx, "scale", "deployment", "web", "--replicas=10"); err != nil {
		return err
	}
	if err := controlplane.WaitFor(ctx, 60*time.Second, "10 endpoints of web in every node's rules", func() (bool, error) {
		return allEqual(d.endpointsInRules(ctx, "web"), 10), nil
	}); err != nil {
		return err
	}
	took := time.Since(start)
	d.say("all %d nodes were reprogrammed with 10 endpoints %d ms after `kubectl scale` started", len(d.cl.Nodes), took.Milliseconds())
	d.say("(kubectl itself, the Deployment and ReplicaSet controllers, Pod start-up, the EndpointSlice write and the nodes' rule updates included)")
	if _, err := d.k(ctx, "get", "endpointslices", "-l", "kubernetes.io/service-name=web"); err != nil {
		return err
	}
	svc, err := d.service(ctx, "web")
	if err != nil {
		return err
	}
	_, err = d.tally(ctx, httpURL(svc.Spec.ClusterIP), 100, 10)
	return err
}

func (d *demo) nodePort(ctx context.Context) error {
	d.title("NodePort: reached on every node's address")
	if _, err := d.k(ctx, "expose", "deployment", "web", "--name=web-nodeport", "--type=NodePort", "--port=80", "--target-port=9376"); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "service", "web-nodeport"); err != nil {
		return err
	}
	svc, err := d.service(ctx, "web-nodeport")
	if err != nil {
		return err
	}
	port := svc.Spec.Ports[0].NodePort
	if port == 0 {
		return errors.New("web-nodeport has no nodePort")
	}
	for _, n := range d.cl.Nodes {
		url := "http://" + net.JoinHostPort(n.IP.String(), strconv.Itoa(int(port))) + "/"
		var body string
		err := controlplane.WaitFor(ctx, 30*time.Second, url+" to answer", func() (bool, error) {
			var err error
			body, err = netlab.Get(ctx, d.http, url)
			return err == nil, err
		})
		d.show(fmt.Sprintf("ip netns exec %s curl -s %s", d.cl.ClientNetNS, url), body)
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) headless(ctx context.Context) error {
	d.title("Headless (clusterIP: None): no IP and no rules, but slices")
	if _, err := d.k(ctx, "expose", "deployment", "web", "--name=web-headless", "--cluster-ip=None", "--port=80", "--target-port=9376"); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "service", "web-headless"); err != nil {
		return err
	}
	if err := controlplane.WaitFor(ctx, 30*time.Second, "10 ready endpoints of web-headless", func() (bool, error) {
		n, err := d.readyEndpoints(ctx, "web-headless")
		return n == 10, err
	}); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "endpointslices", "-l", "kubernetes.io/service-name=web-headless"); err != nil {
		return err
	}
	if err := d.noRules(ctx, "web-headless"); err != nil {
		return err
	}
	if d.cl.DNSIP.IsValid() {
		return d.headlessDNS(ctx)
	}
	return nil
}

// headlessDNS shows a headless Service's name answering with its Pods'
// addresses, before and after a scale.
func (d *demo) headlessDNS(ctx context.Context) error {
	d.title("Headless in DNS: the name answers with the Pods' own addresses, and follows a scale (10 -> 4, then back to 10)")
	name := "web-headless." + demoNamespace
	ips, err := d.podIPs(ctx)
	if err != nil {
		return err
	}
	if err := d.waitResolve(ctx, name, ips, 60*time.Second); err != nil {
		return err
	}
	if _, err := d.k(ctx, "scale", "deployment", "web", "--replicas=4"); err != nil {
		return err
	}
	start := time.Now()
	if err := controlplane.WaitFor(ctx, 60*time.Second, "4 ready Pods of web", func() (bool, error) {
		ips, err = d.podIPs(ctx)
		return len(ips) == 4, err
	}); err != nil {
		return err
	}
	d.say("CoreDNS keeps an answer for its TTL (30 s, cache 30), so a lookup made just before the scale may be served from the cache until then")
	if err := d.waitResolve(ctx, name, ips, 60*time.Second); err != nil {
		return err
	}
	d.say("the name answered with the 4 remaining Pods %d ms after `kubectl scale`", time.Since(start).Milliseconds())
	if _, err := d.k(ctx, "scale", "deployment", "web", "--replicas=10"); err != nil {
		return err
	}
	return controlplane.WaitFor(ctx, 60*time.Second, "10 endpoints of web in every node's rules again", func() (bool, error) {
		return allEqual(d.endpointsInRules(ctx, "web"), 10), nil
	})
}

// noRules shows and checks that no node has a rule for a Service.
func (d *demo) noRules(ctx context.Context, name string) error {
	for _, n := range d.cl.Nodes {
		list := "iptables-save"
		if d.cl.Mode == agent.ModeNFTables {
			list = "nft list ruleset"
		}
		out := d.inNode(ctx, n.NetNS, list+" | grep -c demo/"+name+"[^-]")
		if strings.TrimSpace(out) != "0" {
			return fmt.Errorf("node %s has rules for demo/%s", n.Name, name)
		}
	}
	return nil
}

func (d *demo) externalName(ctx context.Context) error {
	d.title("ExternalName: no IP, no slices, no rules; a CNAME in cluster DNS")
	target := "web." + demoNamespace + ".svc." + addons.ClusterDomain
	if _, err := d.k(ctx, "create", "service", "externalname", "web-external", "--external-name="+target); err != nil {
		return err
	}
	if _, err := d.k(ctx, "get", "service", "web-external"); err != nil {
		return err
	}
	// Give the controllers the time they would need to (wrongly) act.
	time.Sleep(500 * time.Millisecond)
	if _, err := d.k(ctx, "get", "endpointslices", "-l", "kubernetes.io/service-name=web-external"); err != nil {
		return err
	}
	var list discoveryv1.EndpointSliceList
	if err := d.c.List(ctx, &list, client.InNamespace(demoNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: "web-external"}); err != nil {
		return err
	}
	if len(list.Items) > 0 {
		return fmt.Errorf("ExternalName Service web-external has %d EndpointSlices", len(list.Items))
	}
	if err := d.noRules(ctx, "web-external"); err != nil {
		return err
	}
	if !d.cl.DNSIP.IsValid() {
		return nil
	}
	d.say("its name is a CNAME to %s, which the client's resolver follows to web's ClusterIP", target)
	web, err := d.service(ctx, "web")
	if err != nil {
		return err
	}
	return d.waitResolve(ctx, "web-external."+demoNamespace, []string{web.Spec.ClusterIP}, 60*time.Second)
}

func (d *demo) loadBalancer(ctx context.Context) error {
	d.title("LoadBalancer: an IP from the pool, reached from the client through the nodes")
	if _, err := d.k(ctx, "expose", "deployment", "web", "--name=web-lb", "--type=LoadBalancer", "--port=80", "--target-port=9376"); err != nil {
		return err
	}
	var ip string
	err := controlplane.WaitFor(ctx, 15*time.Second, "web-lb's load-balancer IP", func() (bool, error) {
		svc, err := d.service(ctx, "web-lb")
		if err != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return false, err
		}
		ip = svc.Status.LoadBalancer.Ingress[0].IP
		return true, nil
	})
	if _, kerr := d.k(ctx, "get", "service", "web-lb"); kerr != nil {
		return kerr
	}
	if err != nil {
		var pools svcnetv1alpha1.LoadBalancerIPPoolList
		if perr := d.c.List(ctx, &pools); perr == nil && len(pools.Items) == 0 {
			d.say("EXTERNAL-IP stays <pending>: there is no LoadBalancerIPPool (none is made with --load-balancer-ip-range empty or --pipeline=upstream)")
			return nil
		}
		return err
	}
	if _, err := d.k(ctx, "get", "ipaddresses", ip); err != nil {
		return err
	}
	_, err = d.tally(ctx, httpURL(ip), 30, 2)
	return err
}

// httpURL is the URL of ip's port 80, an IPv6 address in brackets.
func httpURL(ip string) string {
	if strings.Contains(ip, ":") {
		ip = "[" + ip + "]"
	}
	return "http://" + ip + "/"
}
