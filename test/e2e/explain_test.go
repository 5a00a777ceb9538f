// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/explain"
)

// explainNS holds the explain test's workload.
const explainNS = "explain"

// explainCase is one `svcnet explain` run and what its report must say.
type explainCase struct {
	svc string
	// ns is the Service's namespace; explainNS when empty.
	ns string
	// on is the node namespace explain runs in ("" for the host); from
	// its flags.
	on   string
	from []string
	// hop and problem: where the path breaks, and a part of the
	// sentence; hop "" for a path that works.
	hop, problem string
	// unseen: the report must say it could not read the agent.
	unseen bool
	// dns: the report must give cluster DNS's answer, asked from the
	// node explain runs on.
	dns bool
}

// TestUpExplain runs `svcnet explain` on `svcnet up --nodes=2` against
// healthy Services of every type and broken ones, each of another
// cause, from a Pod, a node and outside, and checks the hop each report
// names. It runs on a node (where the agents' API is reachable, as on a
// real node) and on the host (outside: the nodes' network is not
// reachable, so the agent is reported unseen, not broken).
func TestUpExplain(t *testing.T) {
	requireNetns(t)
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--load-balancer-ip-range=192.168.240.0/30"))
	c := kubeClient(t, dataDir)
	explainWorkload(t, c)
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	run := func(tc explainCase) (explain.Report, int, string) {
		t.Helper()
		ns := cmp.Or(tc.ns, explainNS)
		argv := append([]string{svcnet(t), "explain", "svc/" + tc.svc, "-n", ns, "--kubeconfig", kubeconfig, "-o", "json"}, tc.from...)
		if tc.on != "" {
			argv = append([]string{"ip", "netns", "exec", "svcnet-" + tc.on}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", argv, err)
		}
		var r explain.Report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v: exit %d, not a report: %v\n%s\n%s", argv, code, err, out, stderr.String())
		}
		return r, code, string(out)
	}
	pod, node, outside := []string{"--from", "pod/client"}, []string{"--node", "node-1"}, []string{"--external", "--node", "node-1", "--client-ip", "192.168.1.77"}
	healthy := map[string]explainCase{
		// Every type; from a node and a Pod the agent is read.
		"ClusterIP from a Pod":      {svc: "web", on: "node-1", from: pod, dns: true},
		"ClusterIP from a node":     {svc: "web", on: "node-1", from: node},
		"NodePort from outside":     {svc: "nodeport", from: outside},
		"NodePort from a node":      {svc: "nodeport", on: "node-2", from: []string{"--node", "node-2"}},
		"LoadBalancer from outside": {svc: "lb", from: outside},
		"LoadBalancer from a Pod":   {svc: "lb", on: "node-1", from: pod, dns: true},
		"headless from a Pod":       {svc: "headless", on: "node-1", from: pod, dns: true},
		"ExternalName from a Pod":   {svc: "extname", on: "node-1", from: pod},
		// On the host, the nodes' network is out of reach: the agent is
		// said unseen, and the path judged without it.
		"ClusterIP from a Pod, explained on the host": {svc: "web", from: pod, unseen: true},
	}
	for name, tc := range healthy {
		t.Run(name, func(t *testing.T) {
			r, code, out := run(tc)
			checkReport(t, tc, r, code, out)
		})
	}
	// Broken, each of another cause, from every client it concerns: a
	// Pod (on node-1), a node (node-1's own programs) and outside (to
	// node-1's nodePort).
	vantages := map[string]explainCase{"a Pod": {on: "node-1", from: pod}, "a node": {on: "node-1", from: node}, "outside": {from: outside}}
	all, inside := []string{"a Pod", "a node", "outside"}, []string{"a Pod", "a node"}
	broken := map[string]struct {
		svc, hop, problem string
		from              []string
	}{
		"a selector matching nothing":   {"nomatch", explain.HopPods, "selector app=webb matches no Pod", all},
		"Pods not Ready":                {"notready", explain.HopPods, "none of the 1 Pod(s) is Ready", all},
		"a named targetPort missing":    {"namedport", explain.HopPods, `targetPort "web" of port 80 matches no port`, all},
		"a targetPort number wrong":     {"wrongport", explain.HopPods, "targetPort 9090 of port 80 is no port", all},
		"iTP Local, no local endpoint":  {"itplocal", explain.HopNode, "internalTrafficPolicy Local and no ready endpoint on node-1", inside},
		"eTP Local, no local endpoint":  {"etplocal", explain.HopExternal, "externalTrafficPolicy Local and no ready endpoint on node-1", []string{"outside"}},
		"an address nothing announces":  {"unannounced", explain.HopExternal, "no LoadBalancerAnnouncement covers", []string{"outside"}},
		"a pool exhausted":              {"exhausted", explain.HopService, "no LoadBalancer address", all},
		"source ranges shutting out":    {"ranges", explain.HopExternal, "loadBalancerSourceRanges 10.0.0.0/8 shut out the client 192.168.1.77", []string{"outside"}},
		"a headless Service from afar":  {"headless", explain.HopService, "not reachable from outside the cluster", []string{"outside"}},
		"another loadBalancerClass":     {"otherclass", explain.HopService, "its class example.com/other is another implementation's", all},
		"a Service that does not exist": {"nope", explain.HopService, "Service explain/nope does not exist", all},
	}
	for name, b := range broken {
		for _, v := range b.from {
			t.Run(name+" from "+v, func(t *testing.T) {
				tc := vantages[v]
				tc.svc, tc.hop, tc.problem = b.svc, b.hop, b.problem
				r, code, out := run(tc)
				checkReport(t, tc, r, code, out)
			})
		}
	}

	t.Run("a Service its namespace's full ServiceCIDR cannot take", func(t *testing.T) {
		fillBoundCIDR(t, c)
		// --from names a Pod of the Service's namespace, which has none.
		for _, v := range []string{"a node", "outside"} {
			tc := vantages[v]
			tc.ns, tc.svc, tc.hop = fullNS, "nope", explain.HopService
			tc.problem = "Service " + fullNS + "/nope does not exist, and the API server refuses to create it now: "
			r, code, out := run(tc)
			checkReport(t, tc, r, code, out)
			if !strings.Contains(r.Broken.Problem, "no free address") || !strings.Contains(r.Broken.Fix, "ServiceCIDR") {
				t.Fatalf("from %s: %+v, want the full ServiceCIDR named", v, r.Broken)
			}
		}
	})

	t.Run("an agent that stopped", func(t *testing.T) {
		pid := agentPID(t, up, "node-2")
		must(t, syscall.Kill(pid, syscall.SIGSTOP))
		defer func() { must(t, syscall.Kill(pid, syscall.SIGCONT)) }()
		tc := explainCase{svc: "web", on: "node-1", from: []string{"--node", "node-2"}, hop: explain.HopNode, problem: "the agent on node-2 does not answer at "}
		r, code, out := run(tc)
		checkReport(t, tc, r, code, out)
	})
}

// checkReport checks a report against its case: the hop and problem of
// a broken path, exit 1; for a working path exit 0 and, from a node's
// namespace, the rules read from the client node's agent.
func checkReport(t *testing.T, tc explainCase, r explain.Report, code int, out string) {
	t.Helper()
	if tc.hop != "" {
		if code != 1 || r.Broken == nil || r.Broken.Hop != tc.hop || !strings.Contains(r.Broken.Problem, tc.problem) {
			t.Fatalf("exit %d, broken at %+v; want exit 1, broken at %s: %q\n%s", code, r.Broken, tc.hop, tc.problem, out)
		}
		return
	}
	if code != 0 || !r.Works {
		t.Fatalf("exit %d, want a working path:\n%s", code, out)
	}
	if tc.dns && !hasFact(r, "cluster DNS at ") {
		t.Fatalf("no answer of cluster DNS:\n%s", out)
	}
	want := " rules send " // read from the client node's agent
	switch {
	case tc.unseen:
		want = "not seen: the agent on node-1"
	case tc.on == "" || tc.svc == "extname" || tc.svc == "headless":
		return
	}
	if !hasFact(r, want) {
		t.Fatalf("no fact with %q:\n%s", want, out)
	}
}

func hasFact(r explain.Report, part string) bool {
	for _, h := range r.Hops {
		for _, f := range h.Facts {
			if strings.Contains(f, part) {
				return true
			}
		}
	}
	return false
}

// explainWorkload creates the Services of the explain test and waits
// until they are as each case needs them.
func explainWorkload(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: explainNS}}))
	pods := []*corev1.Pod{
		explainPod("web-node-1", "node-1", map[string]string{"app": "web", "pin": "node-1"}, nil),
		explainPod("web-node-2", "node-2", map[string]string{"app": "web", "pin": "node-2"}, nil),
		explainPod("client", "node-1", map[string]string{"role": "client"}, nil),
		// Never Ready: its probe asks a port nothing listens on.
		explainPod("sleepy", "node-1", map[string]string{"app": "sleepy"}, &corev1.Probe{PeriodSeconds: 1,
			ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9999)}}}),
	}
	for _, p := range pods {
		must(t, c.Create(ctx, p))
	}
	local := corev1.ServiceInternalTrafficPolicyLocal
	services := []*corev1.Service{
		explainService("web", corev1.ServiceTypeClusterIP, map[string]string{"app": "web"}, intstr.FromString("http")),
		explainService("nodeport", corev1.ServiceTypeNodePort, map[string]string{"app": "web"}, intstr.FromString("http")),
		explainService("lb", corev1.ServiceTypeLoadBalancer, map[string]string{"app": "web"}, intstr.FromString("http")),
		withSpec(explainService("headless", corev1.ServiceTypeClusterIP, map[string]string{"app": "web"}, intstr.FromString("http")), func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }),
		{ObjectMeta: metav1.ObjectMeta{Namespace: explainNS, Name: "extname"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
		explainService("nomatch", corev1.ServiceTypeNodePort, map[string]string{"app": "webb"}, intstr.FromString("http")),
		explainService("notready", corev1.ServiceTypeNodePort, map[string]string{"app": "sleepy"}, intstr.FromString("http")),
		explainService("namedport", corev1.ServiceTypeNodePort, map[string]string{"app": "web"}, intstr.FromString("web")),
		explainService("wrongport", corev1.ServiceTypeNodePort, map[string]string{"app": "web"}, intstr.FromInt32(9090)),
		withSpec(explainService("itplocal", corev1.ServiceTypeClusterIP, map[string]string{"pin": "node-2"}, intstr.FromString("http")), func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = &local }),
		withSpec(explainService("etplocal", corev1.ServiceTypeNodePort, map[string]string{"pin": "node-2"}, intstr.FromString("http")), func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}),
		withSpec(explainService("unannounced", corev1.ServiceTypeLoadBalancer, map[string]string{"app": "web"}, intstr.FromString("http")), func(s *corev1.Service) { s.Labels = map[string]string{"announce": "no"} }),
		withSpec(explainService("ranges", corev1.ServiceTypeLoadBalancer, map[string]string{"app": "web"}, intstr.FromString("http")), func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"} }),
		withSpec(explainService("otherclass", corev1.ServiceTypeLoadBalancer, map[string]string{"app": "web"}, intstr.FromString("http")), func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }),
	}
	// svcnet up's announcement covers every Service but those labelled
	// announce=no.
	var ann svcnetv1alpha1.LoadBalancerAnnouncement
	must(t, c.Get(ctx, client.ObjectKey{Name: upAnnouncement}, &ann))
	ann.Spec.ServiceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "announce", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"no"}}}}
	must(t, c.Update(ctx, &ann))
	for _, s := range services {
		must(t, c.Create(ctx, s))
	}
	waitFor(t, "web's Pods ready in its slices", func() (bool, string) {
		return readyEndpoints(t, c, explainNS, "web") == 2, ""
	})
	waitFor(t, "the client Pod Ready", func() (bool, string) {
		var p corev1.Pod
		must(t, c.Get(ctx, client.ObjectKey{Namespace: explainNS, Name: "client"}, &p))
		return podReady(&p), fmt.Sprint(p.Status.Conditions)
	})
	fillUpPool(t, c)
	announcedBy(t, c, services[2])
}

// fillUpPool takes the rest of svcnet up's pool with LoadBalancer
// Services, then creates exhausted, which gets no address.
func fillUpPool(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	var free int64
	waitFor(t, "the pool's count of allocated addresses", func() (bool, string) {
		var pool svcnetv1alpha1.LoadBalancerIPPool
		must(t, c.Get(ctx, client.ObjectKey{Name: upPool}, &pool))
		var capacity int64
		if _, err := fmt.Sscan(pool.Status.Capacity, &capacity); err != nil {
			return false, fmt.Sprint(pool.Status)
		}
		// web's lb, unannounced and ranges hold one each.
		free = capacity - pool.Status.Allocated
		return pool.Status.Allocated == 3, fmt.Sprint(pool.Status)
	})
	for i := range free {
		must(t, c.Create(ctx, explainService(fmt.Sprintf("fill-%d", i), corev1.ServiceTypeLoadBalancer, map[string]string{"app": "none"}, intstr.FromInt32(80))))
	}
	must(t, c.Create(ctx, explainService("exhausted", corev1.ServiceTypeLoadBalancer, map[string]string{"app": "web"}, intstr.FromString("http"))))
}

// fullNS is a namespace whose only ServiceCIDR, bound to it alone, the
// explain test fills.
const fullNS = "explain-full"

// fillBoundCIDR binds a /30 ServiceCIDR exclusively to fullNS and
// creates Services there until it refuses one.
func fillBoundCIDR(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	must(t, c.Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: fullNS}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/30"}}}))
	must(t, c.Create(ctx, &svcnetv1alpha1.ServiceCIDRBinding{ObjectMeta: metav1.ObjectMeta{Name: fullNS}, Spec: svcnetv1alpha1.ServiceCIDRBindingSpec{
		ServiceCIDRName: fullNS, Exclusive: true,
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": fullNS}}}}))
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fullNS}}))
	for i := 0; ; i++ {
		err := c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: fullNS, Name: fmt.Sprintf("svc-%d", i)},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})
		switch {
		case err != nil && strings.Contains(err.Error(), "no free address"):
			return
		case err != nil && i < 20:
			// The binding or the range not seen yet by the webhook.
			time.Sleep(250 * time.Millisecond)
		case err != nil || i > 20:
			t.Fatalf("filling %s: %d Services, then %v", fullNS, i, err)
		}
	}
}

func explainPod(name, node string, labels map[string]string, readiness *corev1.Probe) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: explainNS, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
			Name: "web", Image: hostnameImage, ReadinessProbe: readiness,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9376}},
		}}}}
}

func explainService(name string, typ corev1.ServiceType, selector map[string]string, target intstr.IntOrString) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: explainNS, Name: name}, Spec: corev1.ServiceSpec{
		Type: typ, Selector: selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: target}}}}
}

func withSpec(s *corev1.Service, f func(*corev1.Service)) *corev1.Service {
	f(s)
	return s
}

// readyEndpoints counts the ready endpoints of a Service's slices.
func readyEndpoints(t *testing.T, c client.Client, ns, svc string) int {
	t.Helper()
	var list discoveryv1.EndpointSliceList
	must(t, c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}))
	n := 0
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ptr.Deref(ep.Conditions.Ready, false) {
				n++
			}
		}
	}
	return n
}
