// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestMetricsNeedAuthorization scrapes the manager's secure /metrics as
// nobody, as a ServiceAccount without the metrics-reader role, and as one
// bound to it (config/default's ClusterRole), against a real API server's
// authentication and authorization.
func TestMetricsNeedAuthorization(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	opts := manager.DefaultOptions()
	opts.Controllers = controllers.Options{Controllers: []string{controllers.EndpointSliceName}}
	opts.MetricsBindAddress = fmt.Sprintf("127.0.0.1:%d", port)
	opts.HealthProbeBindAddress = "0"
	opts.SkipNameValidation = true
	c, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, c)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	cs := kubernetes.NewForConfigOrDie(env.Config)
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
	scrape := func(token string) (int, string) {
		t.Helper()
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the serving certificate is self-signed
		var code int
		var body string
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := hc.Do(req)
			if err != nil {
				return false, nil // not listening yet
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			code, body = resp.StatusCode, string(b)
			return true, nil
		}); err != nil {
			t.Fatalf("no answer from %s: %v", url, err)
		}
		return code, body
	}
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}

	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without credentials: %d, want 401", code)
	}
	if code, _ := scrape(token("stranger")); code != http.StatusForbidden {
		t.Errorf("scrape by a ServiceAccount without the metrics-reader role: %d, want 403", code)
	}

	var reader rbacv1.ClusterRole
	b, err := os.ReadFile("../../../config/default/metrics_reader_role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &reader); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &reader, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, body := scrape(token("scraper"))
	if code != http.StatusOK || !strings.Contains(body, "controller_runtime_reconcile_total") {
		t.Errorf("scrape with the metrics-reader role: %d, want 200 with the metrics; body starts %.200q", code, body)
	}
}
