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
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/migrate"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/test/harness/nodecheck"
	"github.com/svcnet-io/svcnet/test/harness/trafficload"
)

// migrateNS holds the workload of the move.
const migrateNS = "migrate"

// agentLabels select svcnet's agent Pods.
var agentLabels = client.MatchingLabels{"app.kubernetes.io/name": "svcnet-agent"}

// TestUpMigrateFromKubeProxy moves a kubeadm cluster from kube-proxy to
// svcnet's agents and back, node by node, on `svcnet up --kube-proxy
// --install=manifests`, in each mode, with the commands
// docs/operations.md gives: kube-proxy's DaemonSet as kubeadm creates it,
// and svcnet's as config/default, both run by the simulated nodes. A Pod
// on each node opens new TCP connections to a ClusterIP Service every few
// milliseconds, one keeps a connection and a UDP flow open, and a client
// outside opens connections to a NodePort. No request may fail, and after
// each move nothing of kube-proxy's may remain on the node.
func TestUpMigrateFromKubeProxy(t *testing.T) {
	requireNetns(t)
	for _, mode := range agent.Modes {
		t.Run(mode, func(t *testing.T) { testUpMigrate(t, mode) })
	}
}

func testUpMigrate(t *testing.T, mode string) {
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--install=manifests", "--kube-proxy", "--proxy-mode="+mode, "--dns=false", "--cluster-cidr="+kubeadmPodSubnet))
	c := kubeClient(t, dataDir)
	nodes := []string{"node-1", "node-2"}

	t.Log("kube-proxy programs every node; svcnet's agents stand by")
	waitKubeProxyReady(t, c, addons.KubeProxyImage, len(nodes))
	for _, n := range nodes {
		waitPodLog(t, dataDir, c, svcnetSystem, agentLabels, n, "standing by")
		if mode == agent.ModeNFTables && nodecheck.HasSvcnetTable(runOnNode(n)) {
			t.Fatalf("%s: the agent wrote its table while standing by", n)
		}
	}

	checkPlan(t, dataDir, mode)

	web, udp, nodePort := migrateWorkload(t, c, nodes)
	load := trafficload.New()
	defer load.Stop()
	url := "http://" + web.Spec.ClusterIP + "/"
	for i, n := range nodes {
		ns := podNetNS("client-" + n)
		load.NewConnections(ns, url)
		if i == 0 {
			must(t, load.KeepConnection(ns, web.Spec.ClusterIP))
			must(t, load.UDPFlow(ns, net.JoinHostPort(udp.Spec.ClusterIP, "53")))
		}
	}
	load.NewConnections("svcnet-client", fmt.Sprintf("http://%s/", net.JoinHostPort(nodeIP(t, c, nodes[1]), strconv.Itoa(int(nodePort.Spec.Ports[0].NodePort)))))
	waitAnswered(t, load, "kube-proxy")

	t.Log("the controllers: kube-controller-manager's EndpointSlice, mirroring and ServiceCIDR controllers switched off")
	setKCMControllers(t, up, dataDir, "*,-endpointslice-controller,-endpointslice-mirroring-controller,-service-cidr-controller", 1)
	extra := pinnedPod("web-extra", nodes[0], map[string]string{"app": "web"}, corev1.Container{Name: "web", Image: hostnameImage})
	must(t, c.Create(ctx, extra))
	waitEndpoints(t, c, "web", 3, "svcnet's EndpointSlice controller publishes a new Pod")
	waitAnswered(t, load, "svcnet's controllers")

	for _, n := range nodes {
		t.Logf("moving %s to svcnet", n)
		label(t, dataDir, n, "svcnet")
		waitPodLog(t, dataDir, c, svcnetSystem, agentLabels, n, "taking its rules over")
		waitNoPod(t, c, metav1.NamespaceSystem, addons.KubeProxyAppLabels, n)
		waitFor(t, "kube-proxy's rules gone from "+n, func() (bool, string) {
			left := nodecheck.KubeProxyLeftovers(runOnNode(n), mode)
			return left == "", left
		})
		waitAnswered(t, load, "svcnet on "+n)
	}

	for _, n := range nodes {
		t.Logf("handing %s back to kube-proxy", n)
		label(t, dataDir, n, agent.NodeProxyKubeProxy)
		waitPodReady(t, c, metav1.NamespaceSystem, addons.KubeProxyAppLabels, n)
		if mode == agent.ModeNFTables {
			waitFor(t, "svcnet's table gone from "+n, func() (bool, string) { return !nodecheck.HasSvcnetTable(runOnNode(n)), "" })
		}
		waitAnswered(t, load, "kube-proxy again on "+n)
	}
	noRestartsIn(t, c, dataDir, svcnetSystem, agentLabels)

	t.Log("the controllers back: kube-controller-manager's on, then svcnet's manager scaled to 0")
	setKCMControllers(t, up, dataDir, "*", 2)
	if out, errOut, err := kubectl(t, dataDir, "-n", svcnetSystem, "scale", "deployment", "svcnet-manager", "--replicas=0"); err != nil {
		t.Fatalf("kubectl scale deployment svcnet-manager: %v\n%s%s", err, out, errOut)
	}
	waitFor(t, "svcnet's manager Pods gone", func() (bool, string) {
		pods, err := managerPods(ctx, c)
		return err == nil && len(pods) == 0, fmt.Sprint(len(pods), err)
	})
	must(t, c.Delete(ctx, extra))
	waitEndpoints(t, c, "web", 2, "kube-controller-manager's EndpointSlice controller removes a deleted Pod")
	// svcnet's Service webhook fails open, so the ClusterIP is
	// kube-apiserver's own allocator's choice.
	const failedOpen = "apiserver_admission_webhook_fail_open_count"
	open := webhookMetric(t, dataDir, failedOpen)
	fallback := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: migrateNS, Name: "after"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}}}}
	must(t, c.Create(ctx, fallback))
	if got := webhookMetric(t, dataDir, failedOpen); fallback.Spec.ClusterIP == "" || got != open+1 {
		t.Errorf("a Service created with svcnet's manager gone: ClusterIP %q, svcnet's webhook failed open %v times (want a ClusterIP, chosen by kube-apiserver after 1 fail-open)",
			fallback.Spec.ClusterIP, got-open)
	}
	waitAnswered(t, load, "kube-controller-manager's controllers")

	t.Log("svcnet's agents go; kube-proxy gets its health address back and serves alone")
	if out, errOut, err := kubectl(t, dataDir, "-n", svcnetSystem, "delete", "daemonset", "svcnet-agent"); err != nil {
		t.Fatalf("kubectl delete daemonset svcnet-agent: %v\n%s%s", err, out, errOut)
	}
	for _, n := range nodes {
		waitNoPod(t, c, svcnetSystem, agentLabels, n)
		healthz := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(nodeIP(t, c, n), "10256"))
		waitFor(t, "kube-proxy's "+healthz, func() (bool, string) {
			body, err := fromClient(ctx, "svcnet-client", healthz)
			return err == nil, fmt.Sprint(body, err)
		})
	}
	waitAnswered(t, load, "kube-proxy alone")

	r := load.Stop()
	t.Log(r.Summary())
	if len(r.NewFailed) > 0 || len(r.KeptBroken) > 0 || len(r.UDPLost) > 0 {
		t.Errorf("traffic failed during the moves:\nnew connections: %q\nlong-lived connection: %q\nUDP: %q", r.NewFailed, r.KeptBroken, r.UDPLost)
	}
	stopUp(t, up)
}

// checkPlan runs `svcnet migrate plan` on the cluster before the move, as
// docs/operations.md says to: on a cluster set up as kubeadm sets one up,
// with step 1 taken, it must find no blocker, read kube-proxy's mode from
// kubeadm's ConfigMap and not ask for the node affinity already there.
func checkPlan(t *testing.T, dataDir, mode string) {
	t.Helper()
	out, err := exec.Command(svcnet(t), "migrate", "plan", "-o", "json", "--kubeconfig", filepath.Join(dataDir, "kubeconfig")).Output()
	if err != nil {
		t.Fatalf("svcnet migrate plan: %v\n%s", err, out)
	}
	var report migrate.Report
	must(t, json.Unmarshal(out, &report))
	var kubeProxyMode, affinity bool
	for _, f := range report.Findings {
		t.Logf("plan: %s %s %s: %s", f.Severity, f.Area, f.Object, f.Message)
		if f.Area == migrate.AreaKubeProxy && strings.HasPrefix(f.Message, "kube-proxy runs in "+mode+" mode") {
			kubeProxyMode = true
		}
		if strings.Contains(f.Message, "give it a node affinity") {
			affinity = true
		}
	}
	if report.Blockers() > 0 || !kubeProxyMode || affinity {
		t.Errorf("svcnet migrate plan: %d blockers (want 0), kube-proxy's %s mode read: %v (want true), asks for the node affinity already set: %v", report.Blockers(), mode, kubeProxyMode, affinity)
	}
}

// setKCMControllers changes kube-controller-manager's --controllers in
// svcnet up's flags file, as an operator edits kubeadm's static Pod
// manifest, and waits until svcnet up has restarted it for the times-th
// time.
func setKCMControllers(t *testing.T, up *upProcess, dataDir, controllers string, times int) {
	t.Helper()
	path := filepath.Join(dataDir, "kube-controller-manager.flags")
	b, err := os.ReadFile(path)
	must(t, err)
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "--controllers=") {
			lines[i] = "--controllers=" + controllers
		}
	}
	must(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600))
	waitFor(t, "kube-controller-manager restarted with --controllers="+controllers, func() (bool, string) {
		n := strings.Count(up.out.String(), "changed: restarting kube-controller-manager")
		return n >= times, fmt.Sprintf("%d restarts", n)
	})
}

// waitEndpoints waits until Service name's EndpointSlices in namespace
// migrate hold want Ready endpoints.
func waitEndpoints(t *testing.T, c client.Client, name string, want int, what string) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(context.Background(), &slices, client.InNamespace(migrateNS), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready++
				}
			}
		}
		return ready == want, fmt.Sprintf("%d Ready endpoints", ready)
	})
}

// migrateWorkload runs, in namespace migrate, a serve-hostname Pod on each
// node behind a ClusterIP Service web and a NodePort Service
// web-nodeport, an agnhost netexec Pod behind a UDP Service udp (port
// 53), and a client Pod on each node (client-<node>); it waits until
// every client reaches both web Pods.
func migrateWorkload(t *testing.T, c client.Client, nodes []string) (web, udp, nodePort *corev1.Service) {
	t.Helper()
	ctx := context.Background()
	webPort := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9376)}}
	web = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: migrateNS, Name: "web"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: webPort}}
	nodePort = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: migrateNS, Name: "web-nodeport"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"}, Ports: webPort}}
	udp = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: migrateNS, Name: "udp"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "udp"},
		Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(8081)}}}}
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: migrateNS}}, web, nodePort, udp,
		pinnedPod("udp", nodes[1], map[string]string{"app": "udp"}, corev1.Container{Name: "udp", Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
			Args: []string{"netexec", "--http-port=8080", "--udp-port=8081"}}),
	}
	pods := 1 // the udp Pod; two per node below
	webPods := map[string]bool{}
	for _, n := range nodes {
		pods += 2
		objs = append(objs,
			pinnedPod("web-"+n, n, map[string]string{"app": "web"}, corev1.Container{Name: "web", Image: hostnameImage}),
			pinnedPod("client-"+n, n, nil, corev1.Container{Name: "pause", Image: "registry.k8s.io/pause:3.10"}))
		webPods["web-"+n] = true
	}
	createAndWaitReady(t, c, migrateNS, objs, pods)
	for _, n := range nodes {
		// The proxy programs the Service once its endpoints are Ready.
		waitFor(t, "web answers "+n+"'s client", func() (bool, string) {
			body, err := fromClient(ctx, podNetNS("client-"+n), "http://"+web.Spec.ClusterIP+"/")
			return err == nil, fmt.Sprint(body, err)
		})
		reachAll(t, podNetNS("client-"+n), "http://"+web.Spec.ClusterIP+"/", webPods)
	}
	return web, udp, nodePort
}

// pinnedPod is a Pod of namespace migrate on node with one container.
func pinnedPod(name, node string, labels map[string]string, ctr corev1.Container) *corev1.Pod {
	return pinnedPodIn(migrateNS, name, node, labels, ctr)
}

// pinnedPodIn is a Pod of namespace ns on node with one container.
func pinnedPodIn(ns, name, node string, labels map[string]string, ctr corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{ctr}}}
}

// createAndWaitReady creates objs and waits until pods Pods of namespace
// ns are Ready.
func createAndWaitReady(t *testing.T, c client.Client, ns string, objs []client.Object, pods int) {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	waitFor(t, "the Pods of "+ns+" Ready", func() (bool, string) {
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, p := range list.Items {
			if podReady(&p) {
				ready++
			}
		}
		return ready == pods, fmt.Sprintf("%d of %d Ready", ready, pods)
	})
}

// podNetNS is the network namespace of Pod name in namespace migrate on
// the default cluster's nodes.
func podNetNS(name string) string { return podNetNSIn(migrateNS, name) }

// podNetNSIn is the network namespace of Pod name in namespace ns.
func podNetNSIn(ns, name string) string { return "svcnet-pod-" + ns + "-" + name }

// runOnNode runs commands in node's network namespace.
func runOnNode(node string) nodecheck.Run {
	return func(argv ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", "svcnet-" + node}, argv...)...).CombinedOutput()
		return string(out), err
	}
}

// label runs docs/operations.md's move of a node: kubectl label node
// svcnet.io/proxy=value --overwrite.
func label(t *testing.T, dataDir, node, value string) {
	t.Helper()
	if out, errOut, err := kubectl(t, dataDir, "label", "node", node, agent.LabelNodeProxy+"="+value, "--overwrite"); err != nil {
		t.Fatalf("kubectl label node %s: %v\n%s%s", node, err, out, errOut)
	}
}

// nodeIP is a Node's first address.
func nodeIP(t *testing.T, c client.Client, node string) string {
	t.Helper()
	var n corev1.Node
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, &n); err != nil || len(n.Status.Addresses) == 0 {
		t.Fatalf("node %s: %v, addresses %v", node, err, n.Status.Addresses)
	}
	return n.Status.Addresses[0].Address
}

// waitFor polls cond for manifestsWait; cond returns whether it holds and
// what it saw.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, manifestsWait, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	}); err != nil {
		t.Fatalf("%s: not within %s (last: %s)", what, manifestsWait, last)
	}
}

// waitAnswered waits until every flow of load has been answered a few
// more times.
func waitAnswered(t *testing.T, load *trafficload.Load, what string) {
	t.Helper()
	before := load.Snapshot()
	waitFor(t, "traffic answered with "+what, func() (bool, string) { return load.AnsweredSince(before), load.Snapshot().Summary() })
}

// waitPodLog waits until the log of the Pod on node that labels select
// in ns says want, read as `kubectl logs` reads it.
func waitPodLog(t *testing.T, dataDir string, c client.Client, ns string, labels client.MatchingLabels, node, want string) {
	t.Helper()
	cs := clientset(t, dataDir)
	waitFor(t, fmt.Sprintf("the log of %s's Pod on %s says %q", ns, node, want), func() (bool, string) {
		pod, err := podOn(c, ns, labels, node, false)
		if pod == nil || err != nil {
			return false, fmt.Sprint("no Pod: ", err)
		}
		b, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(b), want), pod.Name
	})
}

// waitNoPod waits until no Pod that labels select in ns is on node, not
// even one being deleted.
func waitNoPod(t *testing.T, c client.Client, ns string, labels client.MatchingLabels, node string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s's Pods %v gone from %s", ns, labels, node), func() (bool, string) {
		p, err := podOn(c, ns, labels, node, true)
		if p != nil {
			return false, p.Name
		}
		return err == nil, fmt.Sprint(err)
	})
}

// waitPodReady waits until the Pod that labels select in ns on node is
// Ready.
func waitPodReady(t *testing.T, c client.Client, ns string, labels client.MatchingLabels, node string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s's Pod %v Ready on %s", ns, labels, node), func() (bool, string) {
		p, err := podOn(c, ns, labels, node, false)
		return p != nil && podReady(p), fmt.Sprint(err)
	})
}

// podOn is the Pod that labels select in ns on node, one being deleted
// only if deleting; nil, nil when there is none.
func podOn(c client.Client, ns string, labels client.MatchingLabels, node string, deleting bool) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns), labels); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == node && (deleting || p.DeletionTimestamp == nil) {
			return p, nil
		}
	}
	return nil, nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
