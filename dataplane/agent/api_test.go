// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/svcnet-io/svcnet/internal/nodeview"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestAPIIsAuthorizedAsTheKubelets serves the agent's API against a real
// API server: a caller needs get on nodes/proxy of the agent's node, the
// permission `kubectl get --raw /api/v1/nodes/NODE/proxy/...` needs, and
// credentials of the cluster (its client certificates, or tokens it
// reviews).
func TestAPIIsAuthorizedAsTheKubelets(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	must(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c := newFakeClient()
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.1.2")))
	a, _ := testAgent(t, c)
	go func() { _ = a.Loop(ctx) }()
	port, err := testenv.FreePort()
	must(t, err)
	srv := &apiServer{opts: APIOptions{BindAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, agent: a, restCfg: env.Config, log: logr.Discard()}
	go func() { _ = srv.Start(ctx) }()

	ns, err := env.Namespace(ctx, "agent-api")
	must(t, err)
	kc := kubernetes.NewForConfigOrDie(env.Config)
	tokenOf := func(sa string, nodes ...string) *rest.Config {
		t.Helper()
		_, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must(t, err)
		if len(nodes) > 0 {
			name := ns + "-" + sa
			_, err = kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, ResourceNames: nodes, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
			must(t, err)
			_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}, metav1.CreateOptions{})
			must(t, err)
		}
		tok, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		must(t, err)
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = tok.Status.Token
		return cfg
	}
	web := types.NamespacedName{Namespace: "ns", Name: "web"}
	read := func(cfg *rest.Config) (*nodeview.Service, error) {
		t.Helper()
		cl, err := nodeview.NewClient(cfg, port, true)
		must(t, err)
		var v *nodeview.Service
		deadline := time.Now().Add(20 * time.Second)
		for {
			// Until the server listens and the first sync is done.
			v, err = cl.Service(ctx, "127.0.0.1", web)
			if (err == nil && v.Rendered) || (err != nil && !strings.Contains(err.Error(), "connection refused") && !strings.Contains(err.Error(), "503")) || time.Now().After(deadline) {
				return v, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for name, tc := range map[string]struct {
		cfg  *rest.Config
		want string // "" for an answer; else in the error
	}{
		"the cluster's client certificate (admin)":    {cfg: env.Config},
		"a token allowed nodes/proxy of this node":    {cfg: tokenOf("reader", "node-a")},
		"a token allowed nodes/proxy of another node": {cfg: tokenOf("elsewhere", "node-b"), want: "403 Forbidden: Forbidden (user=system:serviceaccount:" + ns + ":elsewhere, verb=get, resource=nodes, subresource(s)=[proxy])"},
		"a token allowed nothing":                     {cfg: tokenOf("nobody"), want: "403 Forbidden"},
		"no credentials":                              {cfg: rest.AnonymousClientConfig(env.Config), want: "401 Unauthorized"},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := read(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("read: %v", err)
			case tc.want == "" && (!v.Rendered || len(v.Ports) != 1):
				t.Fatalf("view %+v: want the rendered Service", v)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("read: %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("the self-signed serving certificate is not the cluster's", func(t *testing.T) {
		cl, err := nodeview.NewClient(env.Config, port, false)
		must(t, err)
		_, err = cl.Service(ctx, "127.0.0.1", web)
		var untrusted *tls.CertificateVerificationError
		if err == nil || !strings.Contains(err.Error(), "certificate") || !errors.As(err, &untrusted) {
			t.Fatalf("read verifying the agent's certificate: %v, want a certificate verification error", err)
		}
	})
}
