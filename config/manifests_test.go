// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// rendered is config/default as kustomize builds it, one document per
// object, by kind and name.
type rendered map[string][]byte

func render(t *testing.T, kubectl string) rendered {
	t.Helper()
	out, err := exec.Command(kubectl, "kustomize", "default").Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl kustomize config/default: %v\n%s", err, stderr)
	}
	docs := rendered{}
	r := utilyaml.NewYAMLReader(bufioReader(out))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		docs[meta.Kind+"/"+meta.Name] = doc
	}
	return docs
}

func (r rendered) decode(t *testing.T, key string, into any) {
	t.Helper()
	doc, ok := r[key]
	if !ok {
		keys := make([]string, 0, len(r))
		for k := range r {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("config/default has no %s; it has %s", key, strings.Join(keys, ", "))
	}
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// TestDeploymentManifests checks what the deployment promises (least
// privilege, leader-only rollout, an agent on every node with only the
// capabilities it needs, the webhook wired to its Service) and that every
// object passes a server-side dry run against a real API server.
func TestDeploymentManifests(t *testing.T) {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bins, "kubectl")
	docs := render(t, kubectl)

	for key, doc := range docs {
		if !strings.HasPrefix(key, "ClusterRole/") && !strings.HasPrefix(key, "Role/") {
			continue
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(doc, &role); err != nil {
			t.Fatal(err)
		}
		for _, rule := range role.Rules {
			for _, field := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups} {
				if slices.Contains(field, "*") {
					t.Errorf("%s has a wildcard rule: %+v", key, rule)
				}
			}
		}
	}

	var dep appsv1.Deployment
	docs.decode(t, "Deployment/svcnet-manager", &dep)
	if r := dep.Spec.Strategy.RollingUpdate; r == nil || r.MaxSurge.IntValue() != 0 || r.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the manager must roll with maxSurge 0 / maxUnavailable 1 (never a third replica for the Lease): %+v", dep.Spec.Strategy)
	}
	if n := *dep.Spec.Replicas; n != 2 {
		t.Errorf("manager replicas = %d, want 2", n)
	}
	mgr := dep.Spec.Template.Spec.Containers[0]
	if !slices.Contains(mgr.Args, "--leader-elect") || mgr.ReadinessProbe == nil || mgr.LivenessProbe == nil {
		t.Errorf("manager container: leader election and probes expected: %+v", mgr)
	}
	// A standby in sync is Ready (or a rollout deadlocks), the leader's Pod
	// is labelled (it needs its name) and the webhook Service selects it.
	if p := mgr.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz/synced" {
		t.Errorf("the manager's readinessProbe must ask /readyz/synced: %+v", p)
	}
	if !slices.ContainsFunc(mgr.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("the manager needs POD_NAME from metadata.name to label itself leader: %+v", mgr.Env)
	}
	var webhookSvc corev1.Service
	docs.decode(t, "Service/svcnet-webhook-service", &webhookSvc)
	if webhookSvc.Spec.Selector[manager.LeaderLabel] != "true" {
		t.Errorf("the webhook Service must select the leader (%s=true): %v", manager.LeaderLabel, webhookSvc.Spec.Selector)
	}

	var ds appsv1.DaemonSet
	docs.decode(t, "DaemonSet/svcnet-agent", &ds)
	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("the agent must run in the node's network namespace (hostNetwork)")
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("the agent must tolerate every taint: %+v", pod.Tolerations)
	}
	sc := pod.Containers[0].SecurityContext
	if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("the agent needs NET_ADMIN, NET_RAW and NET_BIND_SERVICE (BGP's port) and nothing more: %+v", sc)
	}

	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	docs.decode(t, "MutatingWebhookConfiguration/"+config.WebhookConfigurationName, &mwc)
	ref := mwc.Webhooks[0].ClientConfig.Service
	if ref == nil || ref.Name != "svcnet-webhook-service" || ref.Namespace != "svcnet-system" {
		t.Errorf("webhook clientConfig.service = %+v, want svcnet-system/svcnet-webhook-service", ref)
	}
	var svc corev1.Service
	docs.decode(t, "Service/svcnet-webhook-service", &svc)
	if svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "webhook" {
		t.Errorf("webhook Service ports %+v", svc.Spec.Ports)
	}

	// The server-side dry run needs the namespace to exist.
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "svcnet-system"}}); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	all, err := exec.Command(kubectl, "kustomize", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	apply := exec.Command(kubectl, "--kubeconfig", kc, "apply", "--dry-run=server", "-f", "-")
	apply.Stdin = bytes.NewReader(all)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("server-side dry run of config/default: %v\n%s", err, out)
	} else if n := strings.Count(string(out), "(server dry run)"); n != len(docs) {
		t.Errorf("dry run applied %d objects, config/default has %d:\n%s", n, len(docs), out)
	}
	checkSecretAccess(ctx, t, env, kubectl, kc, docs)
	for _, sample := range []string{"samples/loadbalancerippool.yaml"} {
		apply := exec.Command(kubectl, "--kubeconfig", kc, "apply", "--dry-run=server", "-f", sample)
		if out, err := apply.CombinedOutput(); err != nil {
			t.Errorf("server-side dry run of %s: %v\n%s", sample, err, out)
		}
	}
}

// applyRendered applies the objects keys ("Kind/name") of config/default's
// render with kubectl.
func applyRendered(t *testing.T, kubectl, kubeconfig string, docs rendered, keys ...string) {
	t.Helper()
	var objs bytes.Buffer
	for _, key := range keys {
		doc, ok := docs[key]
		if !ok {
			t.Fatalf("config/default has no %s", key)
		}
		objs.Write(doc)
		objs.WriteString("\n---\n")
	}
	apply := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	apply.Stdin = &objs
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("applying %v: %v\n%s", keys, err, out)
	}
}

// checkSecretAccess applies the manager's RBAC for real and asks the API
// server's authorizer what the manager's ServiceAccount may do with
// Secrets: its certificate Secret in its own namespace, nothing elsewhere.
func checkSecretAccess(ctx context.Context, t *testing.T, env *testenv.Env, kubectl, kc string, docs rendered) {
	t.Helper()
	applyRendered(t, kubectl, kc, docs, "ClusterRole/svcnet-manager", "ClusterRoleBinding/svcnet-manager", "Role/svcnet-manager", "RoleBinding/svcnet-manager")
	for _, tc := range []struct {
		verb, namespace string
		allowed         bool
	}{
		{"get", "svcnet-system", true},
		{"update", "svcnet-system", true},
		{"create", "svcnet-system", true},
		{"get", "kube-system", false},
		{"list", "", false},
		{"watch", "svcnet-system", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:svcnet-system:svcnet-manager",
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:svcnet-system", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: "secrets", Namespace: tc.namespace},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("manager may %s secrets in namespace %q: %t, want %t (%s)", tc.verb, tc.namespace, sar.Status.Allowed, tc.allowed, sar.Status.Reason)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// TestBuildDefaultFromTheBinary: the tree embedded in svcnet builds the
// same objects as config/default on disk (svcnet up --install=manifests
// applies it).
func TestBuildDefaultFromTheBinary(t *testing.T) {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bins, "kubectl")
	onDisk := render(t, kubectl)
	objs, err := config.BuildDefault(context.Background(), kubectl, filepath.Join(t.TempDir(), "config"))
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, u := range objs {
		built[u.GetKind()+"/"+u.GetName()] = true
	}
	for key := range onDisk {
		if !built[key] {
			t.Errorf("the embedded tree does not build %s", key)
		}
	}
	if len(built) != len(onDisk) {
		t.Errorf("the embedded tree builds %d objects, config/default %d", len(built), len(onDisk))
	}
}
