// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package config_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// nodeNameExtra is the user extra kube-apiserver sets, for a Pod-bound
// ServiceAccount token, to the name of the Pod's node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// policyActiveTimeout bounds how long the API server takes to enforce a
// just created ValidatingAdmissionPolicy.
const policyActiveTimeout = 30 * time.Second

// agentClient is a client that the API server takes for the agent's
// ServiceAccount on node (no node: a token bound to no node).
func agentClient(t *testing.T, env *testenv.Env, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:svcnet-system:svcnet-agent",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:svcnet-system", "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nodeReport(name string) *svcnetv1alpha1.LoadBalancerNodeAnnouncement {
	return &svcnetv1alpha1.LoadBalancerNodeAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Addresses: []svcnetv1alpha1.L2AnsweredAddress{{
			Address: "192.168.240.1", Interface: "eth0", Protocol: svcnetv1alpha1.L2ProtocolARP,
			Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}, Since: metav1.NewMicroTime(time.Now().Truncate(time.Microsecond)),
		}}}}
}

// TestAgentRights applies the agent's ClusterRole, its binding and its
// ValidatingAdmissionPolicy from config/default to a real API server and
// acts as the agent of node-a: it may write node-a's
// LoadBalancerNodeAnnouncement and nothing of Services or of other nodes.
func TestAgentRights(t *testing.T) {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bins, "kubectl")
	docs := render(t, kubectl)
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx := context.Background()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	applyRendered(t, kubectl, kc, docs, "ClusterRole/svcnet-agent", "ClusterRoleBinding/svcnet-agent",
		"ValidatingAdmissionPolicy/svcnet-agent-own-node-report", "ValidatingAdmissionPolicyBinding/svcnet-agent-own-node-report")

	admin := env.Client
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := admin.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := admin.Create(ctx, nodeA); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, nodeReport("node-b")); err != nil {
		t.Fatal(err)
	}
	asA := agentClient(t, env, "node-a")

	// The policy is enforced a moment after it is created: wait until a
	// dry run of the write it forbids is refused.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, policyActiveTimeout, true, func(ctx context.Context) (bool, error) {
		err := asA.Create(ctx, nodeReport("node-c"), client.DryRunAll)
		return apierrors.IsForbidden(err), nil
	})
	if err != nil {
		t.Fatalf("node-a's agent may still create node-c's report after %s: the policy is not enforced", policyActiveTimeout)
	}

	t.Run("no write on Services", func(t *testing.T) {
		var svc corev1.Service
		if err := asA.Get(ctx, client.ObjectKeyFromObject(web), &svc); err != nil {
			t.Fatalf("the agent must read Services: %v", err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.1"}}
		if err := asA.Status().Update(ctx, svc.DeepCopy()); !apierrors.IsForbidden(err) {
			t.Errorf("update of services/status: %v, want Forbidden", err)
		}
		patch := client.MergeFrom(svc.DeepCopy())
		svc.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue,
			Reason: svcnetv1alpha1.ServiceReasonL2, Message: "forged", LastTransitionTime: metav1.Now()}}
		if err := asA.Status().Patch(ctx, svc.DeepCopy(), patch); !apierrors.IsForbidden(err) {
			t.Errorf("patch of services/status: %v, want Forbidden", err)
		}
		svc.Spec.Ports[0].Port = 81
		if err := asA.Update(ctx, &svc); !apierrors.IsForbidden(err) {
			t.Errorf("update of a Service: %v, want Forbidden", err)
		}
	})

	t.Run("only its own node's report", func(t *testing.T) {
		err := asA.Create(ctx, nodeReport("node-c"))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may write only the LoadBalancerNodeAnnouncement node-a, not node-c") {
			t.Errorf("node-a's agent creating node-c's report: %v, want Forbidden by the policy", err)
		}
		var b svcnetv1alpha1.LoadBalancerNodeAnnouncement
		if err := asA.Get(ctx, client.ObjectKey{Name: "node-b"}, &b); err != nil {
			t.Fatalf("reading node-b's report: %v", err)
		}
		b.Spec.Addresses = nil
		if err := asA.Update(ctx, &b); !apierrors.IsForbidden(err) {
			t.Errorf("node-a's agent updating node-b's report: %v, want Forbidden", err)
		}
		if err := asA.Delete(ctx, &b); !apierrors.IsForbidden(err) {
			t.Errorf("node-a's agent deleting node-b's report: %v, want Forbidden", err)
		}
		if err := agentClient(t, env, "").Create(ctx, nodeReport("node-a"), client.DryRunAll); !apierrors.IsForbidden(err) {
			t.Errorf("the agent with a token bound to no node creating a report: %v, want Forbidden", err)
		}

		mine := nodeReport("node-a")
		mine.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeA.Name, UID: nodeA.UID}}
		if err := asA.Create(ctx, mine); err != nil {
			t.Fatalf("node-a's agent creating its own report, owned by its Node: %v", err)
		}
		mine.Spec.Addresses = nil
		mine.Spec.Withdrawn = []svcnetv1alpha1.L2WithdrawnAddress{{Address: "192.168.240.1",
			Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}, Since: metav1.NewMicroTime(time.Now().Truncate(time.Microsecond))}}
		if err := asA.Update(ctx, mine); err != nil {
			t.Errorf("node-a's agent updating its own report: %v", err)
		}
	})
}
