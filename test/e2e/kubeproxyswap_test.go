// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/kubeadm"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// kubeadmPodSubnet is the Pod range svcnet up gives its nodes, and the
// networking.podSubnet kubeadm writes into kube-proxy's clusterCIDR.
const kubeadmPodSubnet = "10.244.0.0/16"

// kubeadmProxyConfig is the config.conf of ConfigMap kube-system/kube-proxy
// as kubeadm v1.37 renders it (`kubeadm init`, addon phase kube-proxy) for
// podSubnet kubeadmPodSubnet and a KubeProxyConfiguration that sets only
// conntrack.maxPerCore to 0, as kind's does: on the simulated nodes, as in
// kind's, nf_conntrack_max belongs to the host and is read-only in the
// node's network namespace, and kube-proxy (and the agent) fail to start
// when told to raise it. Every other field is kubeadm's default, the mode
// included: kubeadm v1.37 writes iptables when none is given.
func kubeadmProxyConfig() ([]byte, error) {
	return kubeadm.KubeProxyConfig(map[string]any{"clusterCIDR": kubeadmPodSubnet, "conntrack.maxPerCore": 0})
}

// swapToSvcnet makes kubeadm's kube-proxy DaemonSet run svcnet, changing
// what docs/operations.md tells an operator to change and nothing else:
// the image, and the command's kube-proxy binary, which becomes `/svcnet
// kube-proxy` followed by kubeadm's own flags.
func swapToSvcnet(t *testing.T, ds *appsv1.DaemonSet, image string) {
	t.Helper()
	ctr := &ds.Spec.Template.Spec.Containers[0]
	if len(ctr.Command) == 0 || ctr.Command[0] != "/usr/local/bin/kube-proxy" {
		t.Fatalf("kube-proxy's DaemonSet runs %q, not kube-proxy", ctr.Command)
	}
	ctr.Image = image
	ctr.Command = append([]string{"/svcnet-agent", "kube-proxy"}, ctr.Command[1:]...)
}

// TestUpKubeProxySwap is the last step of replacing kube-proxy on a
// kubeadm cluster, on `svcnet up --install=manifests`: svcnet's own agent
// DaemonSet is deleted, kube-proxy's objects are applied as kubeadm
// creates them with only the image and the command changed, and the
// Services then work through the agent those Pods run, with kubeadm's
// RBAC (system:node-proxier) and kubeadm's config.conf.
func TestUpKubeProxySwap(t *testing.T) {
	requireNetns(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	// The agents of svcnet up's DaemonSet run in nftables mode (the
	// default); kubeadm's file says iptables, so the swapped agent's rules
	// are told apart from its predecessor's.
	up := startUp(t, append(args, "--install=manifests", "--dns=false", "--cluster-cidr="+kubeadmPodSubnet))
	c := kubeClient(t, dataDir)
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 2 {
		t.Fatalf("%d Nodes, want 2", len(nodes.Items))
	}

	// svcnet's agent DaemonSet goes, its Pods with it; the rules they
	// wrote stay, as kube-proxy's do when its Pods go.
	var svcnetAgents appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-agent"}, &svcnetAgents); err != nil {
		t.Fatal(err)
	}
	agentImage := svcnetAgents.Spec.Template.Spec.Containers[0].Image
	if err := c.Delete(ctx, &svcnetAgents); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		err := c.List(ctx, &pods, client.InNamespace(svcnetSystem), client.MatchingLabels{"app.kubernetes.io/name": "svcnet-agent"})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		t.Fatalf("svcnet's agent Pods still there %s after their DaemonSet was deleted: %v", manifestsWait, err)
	}
	for _, n := range []string{"svcnet-node-1", "svcnet-node-2"} {
		if tables, err := nftables.Tables(corev1.IPv4Protocol, netlab.Path(n)); err != nil || !slices.Contains(tables, nftables.TableName) {
			t.Fatalf("%s: svcnet's agents left no table %s behind (tables %v, %v)", n, nftables.TableName, tables, err)
		}
	}

	// Services created now have no proxy on any node to program them.
	web, nodePort, podNames := swapBackend(t, c)
	if body, err := fromClient(ctx, "svcnet-client", "http://"+web.Spec.ClusterIP+"/"); err == nil {
		t.Fatalf("%s answered %q with no proxy on the nodes", web.Spec.ClusterIP, body)
	}

	apiServer, err := addons.ControlPlaneEndpoint(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	config, err := kubeadmProxyConfig()
	if err != nil {
		t.Fatal(err)
	}
	objs := addons.KubeadmKubeProxy(apiServer, config)
	swapToSvcnet(t, objs[len(objs)-1].(*appsv1.DaemonSet), agentImage)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	t.Logf("kube-proxy's DaemonSet runs %s %q against %s", agentImage, objs[len(objs)-1].(*appsv1.DaemonSet).Spec.Template.Spec.Containers[0].Command, apiServer)
	waitKubeProxyReady(t, c, agentImage, len(nodes.Items))

	t.Run("kube-proxy's health and metrics addresses answer on every node: the agent synced", func(t *testing.T) {
		for _, n := range nodes.Items {
			healthz := fmt.Sprintf("http://%s/healthz", net.JoinHostPort(n.Status.Addresses[0].Address, "10256"))
			var body string
			var err error
			if werr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				body, err = fromClient(ctx, "svcnet-client", healthz)
				return err == nil, nil
			}); werr != nil {
				t.Errorf("%s: %q, %v", healthz, body, err)
			}
			// kube-proxy's metrics address, on the node's loopback.
			metrics, err := netlab.Get(ctx, netlab.Client("svcnet-"+n.Name, 2*time.Second), "http://127.0.0.1:10249/metrics")
			if err != nil || !strings.Contains(metrics, "svcnet_agent_rules_written_total") || !strings.Contains(metrics, "kubeproxy_sync_proxy_rules_duration_seconds_count") {
				t.Errorf("%s: /metrics on kube-proxy's metrics address: %v, %.300q; want the agent's series and kube-proxy's sync metrics", n.Name, err, metrics)
			}
		}
	})
	t.Run("the swapped agents own the nodes' rules: kube-proxy's chains, the nftables table of their predecessors removed", func(t *testing.T) {
		chain := iptables.ServiceChain(web.Namespace, web.Name, "http", corev1.ProtocolTCP)
		for _, n := range []string{"svcnet-node-1", "svcnet-node-2"} {
			var jumps int
			var tables []string
			if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				save, err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path(n)).Save(ctx, "nat")
				if err != nil {
					return false, err
				}
				jumps = iptables.EndpointJumps(save, chain)
				tables, err = nftables.Tables(corev1.IPv4Protocol, netlab.Path(n))
				return err == nil && jumps == len(podNames) && !slices.Contains(tables, nftables.TableName), err
			}); err != nil {
				t.Errorf("%s: %s jumps to %d endpoints (want %d), nftables tables %v (want no %s): %v", n, chain, jumps, len(podNames), tables, nftables.TableName, err)
			}
		}
	})
	t.Run("the ClusterIP and the NodePort on every node answer from the Service's Pods", func(t *testing.T) {
		reachAll(t, "svcnet-client", "http://"+web.Spec.ClusterIP+"/", podNames)
		for _, n := range nodes.Items {
			url := fmt.Sprintf("http://%s/", net.JoinHostPort(n.Status.Addresses[0].Address, strconv.Itoa(int(nodePort.Spec.Ports[0].NodePort))))
			reachAll(t, "svcnet-client", url, podNames)
		}
	})
	t.Run("a Pod reaches both Services", func(t *testing.T) {
		target := fmt.Sprintf("http://%s/", net.JoinHostPort(nodes.Items[1].Status.Addresses[0].Address, strconv.Itoa(int(nodePort.Spec.Ports[0].NodePort))))
		// No -T: Debian's static busybox wget crashes with it. serve-hostname
		// ends its answer without a newline.
		script := fmt.Sprintf("wget -q -O - http://%s/ && echo && wget -q -O - %s && echo", web.Spec.ClusterIP, target)
		out, errOut, err := kubectl(t, dataDir, "-n", web.Namespace, "run", "probe", "--rm", "-i", "--restart=Never", "--image=busybox:1.36", "--", "sh", "-c", script)
		answers := 0
		for _, line := range strings.Split(out, "\n") {
			if podNames[strings.TrimSpace(line)] {
				answers++
			}
		}
		if err != nil || answers != 2 {
			t.Errorf("wget of %s and %s from a Pod: %v, %d answers from web's Pods:\n%s%s", web.Spec.ClusterIP, target, err, answers, out, errOut)
		}
	})
	t.Run("the agents run with kubeadm's RBAC: no refusal, no restart", func(t *testing.T) {
		noRestartsIn(t, c, dataDir, metav1.NamespaceSystem, client.MatchingLabels{"k8s-app": "kube-proxy"})
		logs := filepath.Join(dataDir, "logs", "pods", metav1.NamespaceSystem+"_kube-proxy-*", "*", "*.log")
		noForbiddenIn(t, logs)
		files, _ := filepath.Glob(logs)
		started := 0
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "Starting svcnet agent") {
				started++
			}
		}
		if started != len(nodes.Items) {
			t.Errorf("%d of %d kube-proxy Pod logs (%v) say the svcnet agent started", started, len(nodes.Items), files)
		}
	})
	stopUp(t, up)
}

// swapBackend runs two serve-hostname Pods in namespace swap behind a
// ClusterIP Service web and a NodePort Service web-nodeport, and waits
// until both Pods are Ready endpoints; it returns the Services and the
// Pods' names.
func swapBackend(t *testing.T, c client.Client) (*corev1.Service, *corev1.Service, map[string]bool) {
	t.Helper()
	ctx := context.Background()
	const ns = "swap"
	labels := map[string]string{"app": "web"}
	ports := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.ServiceSpec{Selector: labels, Ports: ports}}
	nodePort := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-nodeport"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels, Ports: ports}}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "web", Image: hostnameImage, Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9376}},
			}}}},
		}},
		web, nodePort,
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	podNames := map[string]bool{}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
			return false, err
		}
		clear(podNames)
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) && e.TargetRef != nil {
					podNames[e.TargetRef.Name] = true
				}
			}
		}
		return len(podNames) == 2, nil
	}); err != nil {
		t.Fatalf("web has %d Ready endpoints, want 2: %v", len(podNames), err)
	}
	return web, nodePort, podNames
}

// waitKubeProxyReady waits until kube-proxy's DaemonSet has a Ready,
// up-to-date Pod on each of the nodes running image.
func waitKubeProxyReady(t *testing.T, c client.Client, image string, nodes int) {
	t.Helper()
	var ready []corev1.Pod
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kube-proxy"}, &ds); err != nil {
			return false, err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"k8s-app": "kube-proxy"}); err != nil {
			return false, err
		}
		ready = ready[:0]
		onNode := map[string]bool{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.Containers[0].Image == image {
				ready = append(ready, p)
				onNode[p.Spec.NodeName] = true
			}
		}
		s := ds.Status
		last = fmt.Sprintf("desired %d, ready %d, updated %d; %d Pods, %d Ready on %d nodes", s.DesiredNumberScheduled, s.NumberReady, s.UpdatedNumberScheduled, len(pods.Items), len(ready), len(onNode))
		return int(s.DesiredNumberScheduled) == nodes && int(s.NumberReady) == nodes && int(s.UpdatedNumberScheduled) == nodes && len(onNode) == nodes && len(ready) == nodes, nil
	}); err != nil {
		t.Fatalf("kube-proxy's DaemonSet not Ready on every node within %s: %s", manifestsWait, last)
	}
}
