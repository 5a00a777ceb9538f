// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

const (
	svcnetSystem   = "svcnet-system"
	manifestsWait  = 3 * time.Minute
	requestsPeriod = 20 * time.Millisecond
)

// TestUpManifests runs `svcnet up --nodes=2 --install=manifests --demo`:
// config/default applied and run by the simulated nodes. It checks the
// walkthrough and the deployment's promises, then what a cluster lives
// through: an agent Pod deleted, a rollout of the manager, the leader's
// Pod deleted during Service creates.
func TestUpManifests(t *testing.T) {
	requireNetns(t)
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	up := startUp(t, append(args, "--install=manifests", "--demo"))
	waitOutput(t, up, "Walkthrough complete", walkthroughTimeout)
	c := kubeClient(t, dataDir)

	t.Run("a fresh install starts without restarts", func(t *testing.T) {
		noRestarts(t, c, dataDir)
	})
	t.Run("the managers run, both Ready, the Lease holder labelled leader; an agent on each node", func(t *testing.T) {
		leader := waitManagers(t, c, "")
		var ds appsv1.DaemonSet
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-agent"}, &ds); err != nil {
			t.Fatal(err)
		}
		if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
			t.Errorf("agents: %d of %d ready, want 2 of 2", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		}
		t.Logf("leader %s", leader)
	})
	t.Run("kube-apiserver calls the webhook through its Service: answered, never failed open", func(t *testing.T) {
		webhookAnswers(t, c, dataDir)
	})
	t.Run("the metrics Service answers Prometheus' ServiceAccount bound to svcnet-metrics-reader, and nobody else", func(t *testing.T) {
		metricsThroughService(t, c, dataDir)
	})
	t.Run("a deleted agent Pod leaves its node's rules serving until the new one has synced", func(t *testing.T) {
		agentPodDeleted(t, c)
	})
	t.Run("a rollout of the manager fails no request and completes", func(t *testing.T) {
		managerRollout(t, c)
	})
	t.Run("the leader's Pod deleted during Service creates: the other replica leads, no address twice", func(t *testing.T) {
		leaderDeleted(t, c)
	})
	t.Run("no component was refused by RBAC", func(t *testing.T) {
		noForbidden(t, filepath.Join(dataDir, "logs", "pods"))
	})
	stopUp(t, up)
	if left := namespaces(t, "svcnet-"); len(left) > 0 {
		t.Errorf("namespaces left after svcnet up stopped: %v", left)
	}
}

// webhookMetric reads a kube-apiserver metric of svcnet's Service webhook,
// summed over its series that contain every one of labels.
func webhookMetric(t *testing.T, dataDir, name string, labels ...string) float64 {
	t.Helper()
	raw, err := clientset(t, dataDir).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `name="services.svcnet.io"`) {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(line, l)
		}
		if f := strings.Fields(line); matches && len(f) == 2 {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// webhookAnswers creates a Service and checks in kube-apiserver's metrics
// that the webhook was called and answered, not skipped by failurePolicy
// Ignore.
func webhookAnswers(t *testing.T, c client.Client, dataDir string) {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(context.Background(), client.ObjectKey{Name: "svcnet-mutating-webhook-configuration"}, &mwc); err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks) == 0 || len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatal("svcnet has not filled the webhook's caBundle")
	}
	const admitted, failedOpen = "apiserver_admission_webhook_admission_duration_seconds_count", "apiserver_admission_webhook_fail_open_count"
	calls, open := webhookMetric(t, dataDir, admitted, `operation="CREATE"`, `rejected="false"`), webhookMetric(t, dataDir, failedOpen)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "through-the-webhook"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}},
	}}
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	if got := webhookMetric(t, dataDir, admitted, `operation="CREATE"`, `rejected="false"`); got != calls+1 {
		t.Errorf("the Service webhook answered %v creates, want %v", got, calls+1)
	}
	if got := webhookMetric(t, dataDir, failedOpen); got != open {
		t.Errorf("the Service webhook failed open %v times during the create", got-open)
	}
}

// metricsThroughService scrapes the managers' /metrics through the
// svcnet-manager-metrics Service from the client namespace: with a token
// of a ServiceAccount bound to svcnet-metrics-reader it answers, with one
// not bound or none it refuses.
func metricsThroughService(t *testing.T, c client.Client, dataDir string) {
	ctx := context.Background()
	cs := clientset(t, dataDir)
	token := func(name string) string {
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	prometheus, other := token("prometheus"), token("other")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-svcnet-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "svcnet-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "prometheus"}},
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-manager-metrics"}, &svc); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("https://%s:%d/metrics", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	scrape := func(token string) (int, string, error) {
		hc := netlab.Client("svcnet-client", 5*time.Second)
		hc.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the managers' metrics certificate is self-signed, as Prometheus is told to accept
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	// The binding takes effect in the API server's authorizer at once;
	// the managers cache authorization decisions briefly.
	var code int
	var body string
	var err error
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body, err = scrape(prometheus)
		return err == nil && code == http.StatusOK, nil
	})
	if err != nil || !strings.Contains(body, "svcnet_") {
		t.Fatalf("scraping %s as prometheus: %d, %v, %.200s", url, code, err, body)
	}
	for who, tok := range map[string]string{"a ServiceAccount without the role": other, "nobody": ""} {
		if code, _, err := scrape(tok); err != nil || (code != http.StatusUnauthorized && code != http.StatusForbidden) {
			t.Errorf("scraping %s as %s: %d, %v; want 401 or 403", url, who, code, err)
		}
	}
}

// noForbidden fails on any RBAC refusal in the logs of the manager and
// agent Pods: a verb missing from the generated roles shows up here, not
// as a silent retry loop.
func noForbidden(t *testing.T, logDir string) {
	// <namespace>_<pod>_<uid>/<container>/<restart>.log, as a kubelet keeps them.
	noForbiddenIn(t, filepath.Join(logDir, svcnetSystem+"_*", "*", "*.log"))
}

// noForbiddenIn fails on any RBAC refusal in the Pod logs that glob
// matches, and when it matches none.
func noForbiddenIn(t *testing.T, glob string) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no Pod logs match %s (%v)", glob, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "is forbidden") {
				t.Errorf("%s: %s", filepath.Base(f), line)
			}
		}
	}
}

// noRestarts checks that no container of svcnet-system's Pods restarted:
// a manager that starts before its node reaches the API server waits for
// it rather than exiting.
func noRestarts(t *testing.T, c client.Client, dataDir string) {
	t.Helper()
	noRestartsIn(t, c, dataDir, svcnetSystem)
}

// noRestartsIn checks that no container of the Pods in ns (those opts
// select) restarted, listing them now.
func noRestartsIn(t *testing.T, c client.Client, dataDir, ns string, opts ...client.ListOption) {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, append(opts, client.InNamespace(ns))...); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) == 0 {
		t.Fatal("no Pods in " + ns)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("Pod %s container %s restarted %d times (last: %+v); the end of its log before:\n%s", p.Name, cs.Name, cs.RestartCount,
					cs.LastTerminationState.Terminated, previousLog(t, dataDir, ns, p.Name, cs.Name))
			}
		}
	}
}

// previousLog is the end of the log of a container's previous run, as
// `kubectl logs --previous --tail` shows it.
func previousLog(t *testing.T, dataDir, ns, pod, container string) string {
	t.Helper()
	tail := int64(30)
	b, err := clientset(t, dataDir).CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: true, TailLines: &tail}).DoRaw(context.Background())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b)
}

// managerPods lists the manager's Pods that are not being deleted.
func managerPods(ctx context.Context, c client.Client) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(svcnetSystem), client.MatchingLabels{"app.kubernetes.io/name": "svcnet-manager"}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitManagers waits until two manager Pods run and are Ready, exactly one
// carries the leader label and it holds the Lease, and that leader is not
// notLeader; it returns the leader's name.
func waitManagers(t *testing.T, c client.Client, notLeader string) string {
	t.Helper()
	ctx := context.Background()
	var leader, last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		pods, err := managerPods(ctx, c)
		if err != nil {
			return false, err
		}
		var lease coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-manager"}, &lease); err != nil {
			last = err.Error()
			return false, nil
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		var labelled []string
		ready := 0
		for _, p := range pods {
			if podReady(&p) {
				ready++
			}
			if p.Labels[manager.LeaderLabel] == "true" {
				labelled = append(labelled, p.Name)
			}
		}
		last = fmt.Sprintf("%d Pods, %d Ready, labelled leader %v, Lease holder %q", len(pods), ready, labelled, holder)
		if len(pods) != 2 || ready != 2 || len(labelled) != 1 || labelled[0] == notLeader {
			return false, nil
		}
		leader = labelled[0]
		return strings.HasPrefix(holder, leader+"_"), nil
	})
	if err != nil {
		t.Fatalf("managers not settled within %s: %s", manifestsWait, last)
	}
	return leader
}

// traffic sends a request to url from ns every requestsPeriod until stop
// is called, which returns the number of requests and of failures (with
// the first failure's error).
func traffic(ns, url string) (stop func() (int, int, error)) {
	var sent, failed atomic.Int64
	var first error
	var once sync.Once
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(requestsPeriod):
			}
			sent.Add(1)
			if _, err := fromClient(context.Background(), ns, url); err != nil {
				failed.Add(1)
				once.Do(func() { first = err })
			}
		}
	}()
	return func() (int, int, error) {
		close(done)
		<-finished
		return int(sent.Load()), int(failed.Load()), first
	}
}

// agentPodDeleted deletes node-1's agent Pod while a client sends
// requests to web-nodeport on node-1's address, until the DaemonSet's new
// Pod there is Ready.
func agentPodDeleted(t *testing.T, c client.Client) {
	ctx := context.Background()
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web-nodeport"}, &svc); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(svcnetSystem), client.MatchingLabels{"app.kubernetes.io/name": "svcnet-agent"}); err != nil {
		t.Fatal(err)
	}
	var old *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName == "node-1" {
			old = &pods.Items[i]
		}
	}
	if old == nil {
		t.Fatal("no agent Pod on node-1")
	}
	stop := traffic("svcnet-client", fmt.Sprintf("http://%s:%d/", old.Status.HostIP, svc.Spec.Ports[0].NodePort))
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		if err := c.List(ctx, &pods, client.InNamespace(svcnetSystem), client.MatchingLabels{"app.kubernetes.io/name": "svcnet-agent"}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "node-1" && p.UID != old.UID && podReady(&p) {
				return true, nil
			}
		}
		return false, nil
	})
	// The new agent's first sync comes before its readiness; requests go
	// on a moment longer to cover its rewrite of the rules.
	time.Sleep(time.Second)
	sent, failed, first := stop()
	if err != nil {
		t.Fatalf("no new Ready agent Pod on node-1: %v", err)
	}
	if failed > 0 || sent == 0 {
		t.Errorf("%d of %d requests through node-1 failed while its agent was replaced; first: %v", failed, sent, first)
	}
}

// managerRollout changes the manager's args while a client loops requests
// to web's ClusterIP, and waits for the rollout to finish.
func managerRollout(t *testing.T, c client.Client) {
	ctx := context.Background()
	var web corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, &web); err != nil {
		t.Fatal(err)
	}
	stop := traffic("svcnet-client", "http://"+web.Spec.ClusterIP+"/")
	var dep appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: svcnetSystem, Name: "svcnet-manager"}, &dep); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.Template.Spec.Containers[0].Args = append(dep.Spec.Template.Spec.Containers[0].Args, "--kube-api-burst=150")
	if err := c.Patch(ctx, &dep, patch); err != nil {
		t.Fatal(err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, manifestsWait, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(&dep), &dep); err != nil {
			return false, err
		}
		s := dep.Status
		last = fmt.Sprintf("generation %d observed %d, updated %d, ready %d, available %d, total %d", dep.Generation, s.ObservedGeneration, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, s.Replicas)
		return s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == 2 && s.AvailableReplicas == 2 && s.Replicas == 2, nil
	})
	sent, failed, first := stop()
	if err != nil {
		t.Fatalf("the rollout did not complete within %s: %s", manifestsWait, last)
	}
	if failed > 0 || sent == 0 {
		t.Errorf("%d of %d requests to web failed during the rollout; first: %v", failed, sent, first)
	}
	waitManagers(t, c, "")
}

// leaderDeleted deletes the leader's Pod in the middle of 40 Service
// creates.
func leaderDeleted(t *testing.T, c client.Client) {
	ctx := context.Background()
	leader := waitManagers(t, c, "")
	const ns, n = "failover", 40
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if i == n/4 {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: svcnetSystem, Name: leader}}
			if err := c.Delete(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%02d", i)}, Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "none"},
			Ports:    []corev1.ServicePort{{Port: 80}},
		}}
		if err := c.Create(ctx, svc); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	newLeader := waitManagers(t, c, leader)
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(svcs.Items) != n {
		t.Fatalf("%d Services, want %d", len(svcs.Items), n)
	}
	checkNoDuplicates(t, svcs.Items)
	var lease coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: svcnetSystem, Name: "svcnet-manager"}, &lease); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s -> %s (Lease transitions %d)", leader, newLeader, ptr.Deref(lease.Spec.LeaseTransitions, 0))
}
