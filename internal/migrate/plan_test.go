// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migrate

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers/loadbalancer"
	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/kubeadm"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(testenv.Options{}); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// kubeadmKubeProxy creates what kubeadm creates for kube-proxy: the
// ConfigMap with config.conf, and the DaemonSet that mounts it and runs
// kube-proxy with it on every node.
func kubeadmKubeProxy(t *testing.T, ctx context.Context, changes map[string]any) {
	t.Helper()
	conf, err := kubeadm.KubeProxyConfig(changes)
	must(t, err)
	must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Data: map[string]string{"config.conf": string(conf), "kubeconfig.conf": "apiVersion: v1\nkind: Config\n"}}))
	labels := map[string]string{"k8s-app": "kube-proxy"}
	must(t, env.Client.Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:    "kube-proxy",
						Image:   "registry.k8s.io/kube-proxy:v1.37.1",
						Command: []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}},
					}},
					Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}},
				},
			},
		},
	}))
}

// svcnetAgent creates svcnet's agent DaemonSet as config/default has it,
// with extra arguments.
func svcnetAgent(t *testing.T, ctx context.Context, extra ...string) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "svcnet-agent"}
	must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcnet-system"}}))
	must(t, env.Client.Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "svcnet-agent", Namespace: "svcnet-system"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "agent", Image: "svcnet-agent",
					Args: append([]string{"agent", "--node-name=$(NODE_NAME)", "--mode=iptables"}, extra...),
					Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
				}}},
			},
		},
	}))
}

// metalLBPool serves MetalLB's IPAddressPool kind (a CRD that keeps any
// field, as its schema is MetalLB's business) and creates one pool.
func metalLBPool(t *testing.T, ctx context.Context, name, cidr string) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "ipaddresspools.metallb.io"},
		"spec": map[string]any{
			"group": "metallb.io", "scope": "Namespaced",
			"names": map[string]any{"kind": "IPAddressPool", "listKind": "IPAddressPoolList", "plural": "ipaddresspools", "singular": "ipaddresspool"},
			"versions": []any{map[string]any{"name": "v1beta1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	must(t, env.Client.Create(ctx, crd))
	must(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}))
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": name, "namespace": "metallb-system"},
		"spec":     map[string]any{"addresses": []any{cidr}},
	}}
	deadline := time.Now().Add(30 * time.Second)
	for err := env.Client.Create(ctx, pool); err != nil; err = env.Client.Create(ctx, pool) {
		if time.Now().After(deadline) {
			t.Fatalf("creating MetalLB's pool: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // until the kind is served and known
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlan sets a cluster up as kubeadm and MetalLB's docs do, half
// prepared, and checks that the plan names every difference: kube-proxy's
// settings svcnet ignores, its DaemonSet not yet following the label, the
// unlabelled node, kube-controller-manager's controllers, and the
// LoadBalancer address no pool holds. Then kube-proxy's mode becomes one
// svcnet refuses.
func TestPlan(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	for name, labels := range map[string]map[string]string{"node-1": {agent.LabelNodeProxy: agent.NodeProxyKubeProxy}, "node-2": nil} {
		must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}))
	}
	kubeadmKubeProxy(t, ctx, map[string]any{"clusterCIDR": "10.244.0.0/16", "enableProfiling": true})
	must(t, c.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-node-1", Namespace: "kube-system", Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-controller-manager", Image: "registry.k8s.io/kube-controller-manager:v1.37.1",
			Command: []string{"kube-controller-manager", "--controllers=*,bootstrapsigner,tokencleaner,-service-cidr-controller"}}}},
	}))
	must(t, c.Create(ctx, &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "public"},
		Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.0.2.0/24"}}}))
	lb := func(name, ip string, annotations map[string]string) {
		svc := builder.Service(name, "default").Port("http", 80, intstr.FromInt32(8080)).Obj()
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Annotations = annotations
		must(t, c.Create(ctx, svc))
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
		must(t, c.Status().Update(ctx, svc))
	}
	lb("kept", "192.0.2.10", map[string]string{loadbalancer.MetalLBAnnotationSharingKey: "web"})
	lb("lost", "198.51.100.20", nil)

	report, err := Plan(ctx, c)
	must(t, err)
	t.Logf("the plan:\n%s", dump(report))
	expect(t, report, []Finding{
		{Area: AreaKubeProxy, Severity: Change, Object: "DaemonSet/kube-system/kube-proxy", Message: "give it a node affinity on svcnet.io/proxy In [kube-proxy]"},
		{Area: AreaKubeProxy, Severity: Change, Object: "DaemonSet/kube-system/kube-proxy", Message: "does not act on enableProfiling"},
		{Area: AreaKubeProxy, Severity: Note, Object: "DaemonSet/kube-system/kube-proxy", Message: "kube-proxy runs in iptables mode with --cluster-cidr=10.244.0.0/16"},
		{Area: AreaNodes, Severity: Change, Message: "1 of 2 nodes carry no svcnet.io/proxy label (node-2)"},
		{Area: AreaControllerManager, Severity: Change, Object: "Pod/kube-system/kube-controller-manager-node-1",
			Message: "runs endpointslice-controller, endpointslice-mirroring-controller: once svcnet's manager runs, restart it with --controllers=*,bootstrapsigner,tokencleaner,-service-cidr-controller,-endpointslice-controller,-endpointslice-mirroring-controller"},
		{Area: AreaLoadBalancer, Severity: Blocker, Object: "Service/default/lost", Message: "would lose its address 198.51.100.20"},
		{Area: AreaLoadBalancer, Severity: Note, Object: "Service/default/kept", Message: `svcnet reads metallb.io/allow-shared-ip "web" used as svcnet.io/sharing-key`},
	})
	for _, f := range report.Findings {
		if f.Object == "Service/default/kept" && f.Severity == Blocker {
			t.Errorf("a Service whose address a pool holds is reported as losing it: %+v", f)
		}
	}
	if report.Blockers() != 1 {
		t.Errorf("%d blockers, want 1:\n%s", report.Blockers(), dump(report))
	}

	// MetalLB's pool holding the address: converted, it keeps the Service's
	// address, and the plan says how to carry MetalLB's configuration over.
	metalLBPool(t, ctx, "legacy", "198.51.100.0/24")
	report, err = Plan(ctx, c)
	must(t, err)
	expect(t, report, []Finding{{Area: AreaMetalLB, Severity: Change, Message: "MetalLB is configured (1 IPAddressPool): `svcnet migrate metallb | kubectl apply -f -` writes 1 LoadBalancerIPPools"}})
	if report.Blockers() != 0 {
		t.Errorf("with MetalLB's pool converted, %d blockers, want none:\n%s", report.Blockers(), dump(report))
	}

	// svcnet's agent installed with another Pod range than kube-proxy's,
	// while a node is still unlabelled: both are said, the node a blocker.
	svcnetAgent(t, ctx, "--cluster-cidr=10.245.0.0/16")
	report, err = Plan(ctx, c)
	must(t, err)
	expect(t, report, []Finding{
		{Area: AreaKubeProxy, Severity: Change, Object: "DaemonSet/svcnet-system/svcnet-agent",
			Message: "svcnet's agent runs with --cluster-cidr=10.245.0.0/16, kube-proxy with --cluster-cidr=10.244.0.0/16"},
		{Area: AreaNodes, Severity: Blocker, Message: "1 of 2 nodes carry no svcnet.io/proxy label (node-2)"},
	})

	// kube-proxy in ipvs mode: svcnet's agent refuses it.
	var cm corev1.ConfigMap
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, &cm))
	conf, err := kubeadm.KubeProxyConfig(map[string]any{"mode": "ipvs"})
	must(t, err)
	cm.Data["config.conf"] = string(conf)
	must(t, c.Update(ctx, &cm))
	report, err = Plan(ctx, c)
	must(t, err)
	expect(t, report, []Finding{{Area: AreaKubeProxy, Severity: Blocker, Object: "DaemonSet/kube-system/kube-proxy",
		Message: `"ipvs" is a kube-proxy mode that svcnet does not implement`}})
}

// expect checks that each wanted finding is in the report: same area,
// severity and object, and a message that holds the wanted one.
func expect(t *testing.T, r *Report, want []Finding) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, f := range r.Findings {
			if f.Area == w.Area && f.Severity == w.Severity && f.Object == w.Object && strings.Contains(f.Message, w.Message) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("missing %s %s %s: %q; the report:\n%s", w.Severity, w.Area, w.Object, w.Message, dump(r))
		}
	}
}

func dump(r *Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		b.WriteString(string(f.Severity) + " " + f.Area + " " + f.Object + ": " + f.Message + "\n")
	}
	return b.String()
}
