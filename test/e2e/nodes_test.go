// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/proctree"
	"github.com/svcnet-io/svcnet/test/testenv"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

const walkthroughTimeout = 4 * time.Minute

// waitOutput waits until svcnet up printed want.
func waitOutput(t *testing.T, up *upProcess, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(up.out.String(), want) {
		select {
		case err := <-up.exited:
			t.Fatalf("svcnet up exited (%v) before printing %q:\n%s", err, want, up.out)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("svcnet up did not print %q within %s:\n%s", want, timeout, up.out)
		}
	}
}

// namespaces lists the named network namespaces starting with prefix.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(netlab.Dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// reachAllWait bounds reachAll.
const reachAllWait = 20 * time.Second

// fromClient fetches url from the client namespace.
func fromClient(ctx context.Context, ns, url string) (string, error) {
	body, err := netlab.Get(ctx, netlab.Client(ns, 2*time.Second), url)
	return strings.TrimSpace(body), err
}

// reachAll sends requests to url until every Pod in want answered: at
// least 30 a Pod, and for up to reachAllWait, as a proxy may program the
// last endpoints a sync later than the first (kube-proxy's minimum sync
// period).
func reachAll(t *testing.T, ns, url string, want map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.Now().Add(reachAllWait)
	for i := 0; len(seen) < len(want) && (i < 30*len(want) || time.Now().Before(deadline)); i++ {
		if i >= 30*len(want) {
			time.Sleep(50 * time.Millisecond)
		}
		body, err := fromClient(context.Background(), ns, url)
		if err != nil {
			t.Fatalf("request %d to %s from %s: %v", i, url, ns, err)
		}
		if !want[body] {
			t.Fatalf("%s answered %q, not one of the Service's Pods", url, body)
		}
		seen[body] = true
	}
	if len(seen) < len(want) {
		t.Fatalf("requests to %s reached %d of %d Pods", url, len(seen), len(want))
	}
}

// TestUpNodes runs `svcnet up --nodes=2 --demo` as a user would and checks
// the walkthrough's facts on its own: nodes, Pods with namespaces, IPs,
// slices, rules and traffic for every Service type; then a clean stop, a
// crash, and the restart that cleans up after the crash.
func TestUpNodes(t *testing.T) {
	requireNetns(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	// iptables mode here, restarts included; TestUpNFTables runs the
	// default, nftables.
	args = append(args, "--proxy-mode=iptables")
	up := startUp(t, append(args, "--demo"))
	waitOutput(t, up, "Walkthrough complete", walkthroughTimeout)
	out := up.out.String()
	for _, want := range []string{"2 nodes up", "kubectl -n demo get ipaddresses", "nodes were reprogrammed with 10 endpoints", "KUBE-SVC-", "-j DNAT"} {
		if !strings.Contains(out, want) {
			t.Errorf("the walkthrough's output lacks %q", want)
		}
	}
	c := kubeClient(t, dataDir)

	// Nodes: registered, Ready, each with a Pod CIDR and a zone.
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("want 2 Nodes, got %d", len(nodes.Items))
	}
	for _, n := range nodes.Items {
		ready := false
		for _, cond := range n.Status.Conditions {
			ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
		}
		if !ready || n.Spec.PodCIDR == "" || n.Labels[corev1.LabelTopologyZone] == "" {
			t.Errorf("Node %s: ready=%v podCIDR=%q zone=%q", n.Name, ready, n.Spec.PodCIDR, n.Labels[corev1.LabelTopologyZone])
		}
	}

	// Pods: 10 Running and Ready, spread, each with its own namespace.
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("demo")); err != nil {
		t.Fatal(err)
	}
	podNames := map[string]bool{}
	perNode := map[string]int{}
	// Pods of the scale-down in the walkthrough may still be within
	// their grace period (serve-hostname ignores SIGTERM as PID 1, as in a
	// container): they are not the Deployment's any more.
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			t.Errorf("Pod %s: phase %s, IP %q", p.Name, p.Status.Phase, p.Status.PodIP)
		}
		podNames[p.Name] = true
		perNode[p.Spec.NodeName]++
	}
	// Spread: pods still terminating after the scale-down count on
	// their node, as for the scheduler.
	if len(podNames) != 10 || perNode["node-1"] < 3 || perNode["node-2"] < 3 {
		t.Errorf("want 10 Pods spread over both nodes; got %d: %v", len(podNames), perNode)
	}
	all := namespaces(t, "svcnet-")
	for _, want := range []string{"svcnet-fabric", "svcnet-node-1", "svcnet-node-2", "svcnet-client"} {
		if !strings.Contains(strings.Join(all, " ")+" ", want+" ") {
			t.Errorf("no network namespace %s in %v", want, all)
		}
	}
	if got := len(namespaces(t, "svcnet-pod-demo-")); got < 10 {
		t.Errorf("want a namespace per Pod (at least the 10 running), got %d", got)
	}

	// ClusterIP: an IPAddress with the Service as parent; rules on every
	// node; the client reaches all 10 Pods.
	var web corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	var ipa networkingv1.IPAddress
	if err := c.Get(ctx, client.ObjectKey{Name: web.Spec.ClusterIP}, &ipa); err != nil {
		t.Fatalf("IPAddress %s: %v", web.Spec.ClusterIP, err)
	}
	if ipa.Spec.ParentRef == nil || ipa.Spec.ParentRef.Name != "web" || ipa.Spec.ParentRef.Namespace != "demo" {
		t.Errorf("IPAddress %s parent %+v, want services demo/web", ipa.Name, ipa.Spec.ParentRef)
	}
	chain := iptables.ServiceChain("demo", "web", "", corev1.ProtocolTCP)
	for _, n := range []string{"svcnet-node-1", "svcnet-node-2"} {
		save, err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path(n)).Save(ctx, "nat")
		if got := iptables.EndpointJumps(save, chain); err != nil || got != 10 {
			t.Errorf("%s: %s jumps to %d KUBE-SEP chains, want 10 (%v)", n, chain, got, err)
		}
	}
	reachAll(t, "svcnet-client", "http://"+web.Spec.ClusterIP+"/", podNames)

	// NodePort on both nodes' addresses.
	var np corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web-nodeport"}, &np); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		url := fmt.Sprintf("http://%s:%d/", n.Status.Addresses[0].Address, np.Spec.Ports[0].NodePort)
		if body, err := fromClient(ctx, "svcnet-client", url); err != nil || !podNames[body] {
			t.Errorf("NodePort %s: %q, %v", url, body, err)
		}
	}

	// Headless: no IP, slices with all 10; ExternalName: no slices.
	var headless corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web-headless"}, &headless); err != nil {
		t.Fatal(err)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service has ClusterIP %q", headless.Spec.ClusterIP)
	}
	for name, want := range map[string]int{"web-headless": 10, "web-external": 0} {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace("demo"), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Terminating == nil || !*e.Conditions.Terminating {
					got++ // terminating ones stay listed until their Pods are gone
				}
			}
		}
		if got != want || (want == 0) != (len(slices.Items) == 0) {
			t.Errorf("%s: %d slices with %d endpoints, want %d endpoints", name, len(slices.Items), got, want)
		}
	}

	// LoadBalancer: an IP from svcnet up's pool, reached from the client
	// through the nodes.
	var lb corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web-lb"}, &lb); err != nil {
		t.Fatal(err)
	}
	if len(lb.Status.LoadBalancer.Ingress) != 1 || !strings.HasPrefix(lb.Status.LoadBalancer.Ingress[0].IP, "192.168.240.") {
		t.Fatalf("web-lb ingress %+v, want one IP of 192.168.240.0/24", lb.Status.LoadBalancer.Ingress)
	}
	reachAll(t, "svcnet-client", "http://"+lb.Status.LoadBalancer.Ingress[0].IP+"/", podNames)
	checkAnnounced(ctx, t, c, &lb)

	// A Service without a selector, backed by a hand-written Endpoints
	// object naming one Pod: svcnet's mirroring controller gives it a
	// slice, the agents rules, and the client reaches that Pod.
	target := pods.Items[0]
	external := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "by-hand"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if err := c.Create(ctx, external); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "by-hand"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: target.Status.PodIP}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: 9376}},
		}},
	}); err != nil {
		t.Fatal(err)
	}
	var answer string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		answer, _ = fromClient(ctx, "svcnet-client", "http://"+external.Spec.ClusterIP+"/")
		return answer == target.Name, nil
	}); err != nil {
		t.Fatalf("the selector-less Service %s does not reach %s named by its Endpoints: last answer %q", external.Spec.ClusterIP, target.Name, answer)
	}

	t.Run("the seeds' demo, verbatim", func(t *testing.T) { seedsDemo(t, dataDir, c) })

	controlPlaneRestart(t, up, c, web.Spec.ClusterIP, podNames)

	// A second svcnet up at the same time gets namespaces of its own; a
	// named one, its name's, and ports it chose itself.
	secondArgs := upArgs(t, t.TempDir())
	secondArgs[1] = "--nodes=1"
	second := startUp(t, secondArgs)
	if got := namespaces(t, "svcnet-2-node-"); len(got) != 1 {
		t.Errorf("second svcnet up: want namespace svcnet-2-node-1, got %v", got)
	}
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	namedDir := t.TempDir()
	named := startUp(t, []string{"up", "--name=e2e", "--nodes=1", "--dns=false", "--data-dir", namedDir, "--k8s-bin-dir", bins,
		"--images-dir", filepath.Join(filepath.Dir(bins), "images")})
	if got := namespaces(t, "e2e-node-"); len(got) != 1 {
		t.Errorf("svcnet up --name=e2e: want namespace e2e-node-1, got %v", got)
	}
	var ports struct {
		APIServer int `json:"apiserver"`
	}
	if data, err := os.ReadFile(filepath.Join(namedDir, "ports.json")); err != nil || json.Unmarshal(data, &ports) != nil || ports.APIServer == 0 {
		t.Errorf("a named cluster keeps the ports it chose in its data dir: %v %s", err, data)
	}
	if kc, err := os.ReadFile(filepath.Join(namedDir, "kubeconfig")); err != nil || !strings.Contains(string(kc), fmt.Sprintf("127.0.0.1:%d", ports.APIServer)) {
		t.Errorf("the named cluster's kubeconfig does not use its own API server port %d: %v", ports.APIServer, err)
	}
	stopUp(t, named)
	stopUp(t, second)
	if got := append(namespaces(t, "svcnet-2-"), namespaces(t, "e2e-")...); len(got) != 0 {
		t.Errorf("the second and named svcnet up left namespaces behind: %v", got)
	}

	// SIGTERM: every process and namespace goes.
	stopUp(t, up)
	if got := namespaces(t, "svcnet"); len(got) != 0 {
		t.Errorf("namespaces left after svcnet up stopped: %v", got)
	}

	// A crash leaves namespaces; the next start removes them and brings
	// the Pods back, serving.
	up = startUp(t, args)
	waitOutput(t, up, "nodes up", time.Minute)
	kids := proctree.Descendants(up.cmd.Process.Pid)
	if err := up.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-up.exited; err == nil {
		t.Error("svcnet up exited cleanly after SIGKILL")
	}
	waitGone(t, kids)
	if got := namespaces(t, "svcnet-node-"); len(got) != 2 {
		t.Fatalf("after SIGKILL the node namespaces should still be there for the next start to clean, got %v", got)
	}
	up = startUp(t, args)
	waitOutput(t, up, "network namespaces left by an earlier run", time.Minute)
	var body string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		body, err = fromClient(ctx, "svcnet-client", "http://"+web.Spec.ClusterIP+"/")
		return err == nil && podNames[body], nil
	}); err != nil {
		t.Fatalf("after the restart, %s does not answer from a Pod: last answer %q", web.Spec.ClusterIP, body)
	}
	stopUp(t, up)
	if got := namespaces(t, "svcnet"); len(got) != 0 {
		t.Errorf("namespaces left after svcnet up stopped: %v", got)
	}
	// Nothing was added to the namespace the test runs in.
	ifaces, _ := net.Interfaces()
	if len(ifaces) != 1 {
		t.Errorf("svcnet up touched the caller's network namespace: interfaces %v", ifaces)
	}
}

// controlPlaneRestart kills etcd and kube-apiserver under svcnet up while
// the client sends requests through a Service: svcnet up restarts them, the
// nodes keep their rules (no request fails), and a change made after the
// restart is programmed on every node.
func controlPlaneRestart(t *testing.T, up *upProcess, c client.Client, clusterIP string, podNames map[string]bool) {
	t.Helper()
	ctx := context.Background()
	var requests, failures atomic.Int64
	stop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			body, err := fromClient(ctx, "svcnet-client", "http://"+clusterIP+"/")
			requests.Add(1)
			// A Pod of web answers (the scale below adds one).
			if err != nil || !podNames[body] && !strings.HasPrefix(body, "web-") {
				failures.Add(1)
				t.Logf("request through %s during the control plane restart: %q, %v", clusterIP, body, err)
			}
		}
	}()
	killed := 0
	for _, pid := range proctree.Descendants(up.cmd.Process.Pid) {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if name := strings.TrimSpace(string(comm)); name == "etcd" || name == "kube-apiserver" {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed != 2 {
		t.Fatalf("found %d of etcd and kube-apiserver below svcnet up, want 2", killed)
	}
	waitOutput(t, up, "kube-apiserver stopped", time.Minute)
	// A change after the restart: one more replica, on every node's rules.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
		err := c.SubResource("scale").Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":11}}`)))
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the API server did not come back after svcnet up restarted it:\n%s", up.out.String())
	}
	chain := iptables.ServiceChain("demo", "web", "", corev1.ProtocolTCP)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range []string{"svcnet-node-1", "svcnet-node-2"} {
			save, err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path(n)).Save(ctx, "nat")
			if err != nil || iptables.EndpointJumps(save, chain) != 11 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal("the scale to 11 after the restart was not programmed on every node")
	}
	close(stop)
	<-loopDone
	// Whichever Pod the scale back to 10 removes, later checks accept the
	// ones that remain.
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("demo")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		podNames[p.Name] = true
	}
	if failures.Load() != 0 || requests.Load() < 10 {
		t.Errorf("%d of %d requests through %s failed across the control plane restart, want none", failures.Load(), requests.Load(), clusterIP)
	}
	// Back to 10, as the rest of the test expects.
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	if err := c.SubResource("scale").Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":10}}`))); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane restart: %d requests, %d failed", requests.Load(), failures.Load())
}

// stopUp sends SIGTERM and waits for svcnet up and all its children.
func stopUp(t *testing.T, up *upProcess) {
	t.Helper()
	kids := proctree.Descendants(up.cmd.Process.Pid)
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		// It exited on its own, before the test was done with it.
		select {
		case exitErr := <-up.exited:
			t.Fatalf("svcnet up had already exited (%v):\n%s", exitErr, up.out)
		case <-time.After(stopTimeout):
			t.Fatalf("signalling svcnet up: %v\n%s", err, up.out)
		}
	}
	select {
	case err := <-up.exited:
		if err != nil {
			t.Errorf("svcnet up exited with %v after SIGTERM:\n%s", err, up.out)
		}
	case <-time.After(stopTimeout):
		t.Fatalf("svcnet up did not stop after SIGTERM:\n%s", up.out)
	}
	waitGone(t, kids)
}

// checkAnnounced checks that svcnet up's default L2 announcement reached
// the client: the Service names the node answering for its address, and
// the client's neighbour entry holds that node's MAC.
func checkAnnounced(ctx context.Context, t *testing.T, c client.Client, lb *corev1.Service) {
	t.Helper()
	ip := lb.Status.LoadBalancer.Ingress[0].IP
	var msg string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKeyFromObject(lb), &svc); err != nil {
			return false, err
		}
		if cond := apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced); cond != nil && cond.Status == metav1.ConditionTrue {
			msg = cond.Message
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("web-lb never said who announces it: %v", err)
	}
	fields := strings.Fields(msg) // "<ip> answered by <node> (ARP on eth0)"
	if len(fields) < 4 || fields[0] != ip {
		t.Fatalf("web-lb's %s condition: %q", svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, msg)
	}
	mac, err := exec.Command("ip", "netns", "exec", "svcnet-"+fields[3], "cat", "/sys/class/net/eth0/address").Output()
	if err != nil {
		t.Fatalf("reading %s's MAC: %v", fields[3], err)
	}
	neigh, _ := exec.Command("ip", "netns", "exec", "svcnet-client", "ip", "neigh", "show", ip).Output()
	if !strings.Contains(string(neigh), strings.TrimSpace(string(mac))) {
		t.Errorf("the client's neighbour entry for %s is %q, want %s's MAC %s (%s)", ip, neigh, fields[3], mac, msg)
	}
}
