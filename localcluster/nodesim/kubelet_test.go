// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/exec"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// shellImage shares this machine's programs (sh, cat, sleep ...), as the
// images of bin/images that list hostDirs do.
var shellImage = images.Image{Name: "shell", Repositories: []string{"svcnet.test/shell"},
	Config:   images.Config{Cmd: []string{"sh"}, Env: []string{"IMAGE_ENV=from-image"}},
	HostDirs: []string{"/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/alternatives"}}

// kubeletClient reaches one node's kubelet API from the test, through a
// forwarder into the node's namespace, as a user of the cluster CA.
type kubeletClient struct {
	cfg  *rest.Config
	http *http.Client
	base string
}

func newKubeletClient(t *testing.T, node Node, caCert, caKey []byte, user string, groups ...string) *kubeletClient {
	t.Helper()
	addr := forwardInto(t, netlab.Path(node.Net.NetNS), net.JoinHostPort(node.Net.IP.String(), "10250"))
	cfg := &rest.Config{Host: "https://" + addr, TLSClientConfig: rest.TLSClientConfig{CAData: caCert, ServerName: node.Name}}
	if user != "" {
		certPEM, keyPEM, err := certs.NewClient(caCert, caKey, user, groups, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg.CertData, cfg.KeyData = certPEM, keyPEM
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &kubeletClient{cfg: cfg, http: hc, base: cfg.Host}
}

// forwardInto serves a port on the test's loopback whose connections go
// to target inside the namespace at path.
func forwardInto(t *testing.T, path, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	dial := netns.DialContext(path)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := dial(context.Background(), "tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return l.Addr().String()
}

func (k *kubeletClient) exec(path string, stdin io.Reader, tty bool) (string, string, error) {
	u, err := url.Parse(k.base + path)
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewSPDYExecutor(k.cfg, http.MethodPost, u)
	if err != nil {
		return "", "", err
	}
	var out, errOut bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tty}
	if !tty {
		opts.Stderr = &errOut
	}
	err = ex.StreamWithContext(context.Background(), opts)
	return out.String(), errOut.String(), err
}

func (k *kubeletClient) get(path string) (int, string, error) {
	resp, err := k.http.Get(k.base + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func execPath(ns, pod, ctr string, stdin, tty bool, cmd ...string) string {
	q := url.Values{"output": {"1"}, "error": {"1"}}
	if tty {
		q.Del("error")
		q.Set("tty", "1")
	}
	if stdin {
		q.Set("input", "1")
	}
	q["command"] = cmd
	return fmt.Sprintf("/exec/%s/%s/%s?%s", ns, pod, ctr, q.Encode())
}

// TestKubeletAPI serves the kubelet API of a simulated node from real
// containers and checks what kubectl and kube-apiserver use of it: exec
// (streams, terminal, exit codes), attach, logs (follow, previous),
// port-forward, /pods, and the authentication and authorization of its
// callers; with the Pod semantics programs rely on (hostname, hosts
// file, Service env vars, exec probes, hostNetwork and hostPorts).
func TestKubeletAPI(t *testing.T) {
	privateNS.Require(t)
	g := NewWithT(t)
	ctx := context.Background()
	env, lab, _ := startEnvAndLab(t, "kl")
	n, err := lab.AddNode("node-1", netip.MustParsePrefix("172.31.0.11/24"), netip.MustParsePrefix("10.244.1.0/24"))
	g.Expect(err).NotTo(HaveOccurred())
	client1, err := lab.AddClient("client", netip.MustParsePrefix("172.31.0.100/24"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(lab.RouteVia(client1, n.PodCIDR, n.IP)).To(Succeed())
	node := Node{Name: n.Name, Zone: "zone-a", Net: n}
	caCert, caKey, err := certs.NewCA("svcnet-test-ca", time.Now(), time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	store := &images.Store{}
	store.Add(shellImage, probeAppImage(t))
	logDir := filepath.Join(t.TempDir(), "pods")
	runSimulator(t, env, Options{Nodes: []Node{node}, Images: store, RestartBackoff: time.Second, LogDir: logDir,
		Kubelet: &KubeletOptions{CACert: caCert, CAKey: caKey}})
	ns, err := env.Namespace(ctx, "kubelet")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}})).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
	g.Expect(env.Client.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-db"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}}})).To(Succeed())

	admin := newKubeletClient(t, node, caCert, caKey, "kube-apiserver-kubelet-client", "system:masters")
	waitRunning := func(name string) *corev1.Pod {
		t.Helper()
		var p corev1.Pod
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
			g.Expect(p.Status.ContainerStatuses).NotTo(BeEmpty(), "events: %s", podEvents(ctx, env, &p))
			g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		return &p
	}
	shell := func(name, script string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "c", Image: "svcnet.test/shell", Command: []string{"sh", "-c", script}}},
		}}
	}
	g.Expect(env.Client.Create(ctx, shell("sh", `echo started; echo to-stderr >&2; trap 'exit 0' TERM; while :; do sleep 0.2; done`))).To(Succeed())
	waitRunning("sh")

	t.Run("exec runs in the container: its env, hostname, hosts file and Service links; streams and exit codes", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, err := admin.exec(execPath(ns, "sh", "c", true, false, "sh", "-c",
			`echo "$(hostname) $IMAGE_ENV $MY_DB_SERVICE_PORT"; cat; grep -c sh /etc/hosts; echo oops >&2; exit 3`), strings.NewReader("typed\n"), false)
		var exitErr exec.ExitError
		g.Expect(errors.As(err, &exitErr)).To(BeTrue(), "a non-zero exit is reported as an exit code: %v", err)
		g.Expect(exitErr.ExitStatus()).To(Equal(3))
		g.Expect(out).To(Equal("sh from-image 5432\ntyped\n1\n"))
		g.Expect(errOut).To(Equal("oops\n"))
		out, _, err = admin.exec(execPath(ns, "sh", "c", false, true, "sh", "-c", "test -t 1 && echo terminal"), nil, true)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(ContainSubstring("terminal"))
		_, errOut, err = admin.exec(execPath(ns, "sh", "c", false, false, "no-such-command"), nil, false)
		g.Expect(errors.As(err, &exitErr)).To(BeTrue(), "%v", err)
		g.Expect(exitErr.ExitStatus()).To(Equal(126))
		g.Expect(errOut).To(ContainSubstring("not found"))
	})

	t.Run("logs: the container's output, follow, and the previous run's after a restart", func(t *testing.T) {
		g := NewWithT(t)
		code, body, err := admin.get(fmt.Sprintf("/containerLogs/%s/sh/c", ns))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		// stdout and stderr are two pipes: their lines interleave in any
		// order, as with any container runtime.
		g.Expect(strings.Split(body, "\n")).To(ConsistOf("started", "to-stderr", ""))
		_, body, _ = admin.get(fmt.Sprintf("/containerLogs/%s/sh/c?timestamps=true&tailLines=1", ns))
		g.Expect(body).To(MatchRegexp(`^\d{4}-\d\d-\d\dT[^ ]+ (started|to-stderr)\n$`))
		_, body, _ = admin.get(fmt.Sprintf("/containerLogs/%s/sh/c?stream=Stderr", ns))
		g.Expect(body).To(Equal("to-stderr\n"))
		code, body, _ = admin.get(fmt.Sprintf("/containerLogs/%s/sh/c?previous=true", ns))
		g.Expect(code).To(Equal(http.StatusBadRequest), body)
		// The shell's PID 1 handles SIGTERM: it exits and is restarted.
		_, _, err = admin.exec(execPath(ns, "sh", "c", false, false, "kill", "1"), nil, false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) {
			var p corev1.Pod
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sh"}, &p)).To(Succeed())
			g.Expect(p.Status.ContainerStatuses[0].RestartCount).To(BeEquivalentTo(1))
			g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		_, body, _ = admin.get(fmt.Sprintf("/containerLogs/%s/sh/c?previous=true", ns))
		g.Expect(strings.Split(body, "\n")).To(ConsistOf("started", "to-stderr", ""))
		// follow: the request streams until the container ends.
		resp, err := admin.http.Get(admin.base + fmt.Sprintf("/containerLogs/%s/sh/c?follow=true", ns))
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		_, _, err = admin.exec(execPath(ns, "sh", "c", false, false, "sh", "-c", "echo late > /proc/1/fd/1"), nil, false)
		g.Expect(err).NotTo(HaveOccurred())
		buf := make([]byte, 64)
		var got strings.Builder
		g.Eventually(func() string {
			n, _ := resp.Body.Read(buf)
			got.Write(buf[:n])
			return got.String()
		}).WithTimeout(10 * time.Second).Should(ContainSubstring("late"))
	})

	t.Run("attach: stdin to a stdinOnce container, its output back", func(t *testing.T) {
		g := NewWithT(t)
		p := shell("attach", `read line; echo "got $line"`)
		p.Spec.Containers[0].Stdin, p.Spec.Containers[0].StdinOnce = true, true
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		waitRunning("attach")
		out, _, err := admin.exec(fmt.Sprintf("/attach/%s/attach/c?input=1&output=1&error=1", ns), strings.NewReader("hello\n"), false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("got hello\n"))
		g.Eventually(func() corev1.PodPhase {
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return p.Status.Phase
		}).WithTimeout(10 * time.Second).Should(Equal(corev1.PodSucceeded))
		_, body, _ := admin.get(fmt.Sprintf("/containerLogs/%s/attach/c", ns))
		g.Expect(body).To(Equal("got hello\n"), "logs of a finished Pod")
	})

	t.Run("port-forward reaches the Pod's loopback", func(t *testing.T) {
		g := NewWithT(t)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "svcnet.test/probeapp", Args: []string{"-listen", "127.0.0.1:8080"}}},
		}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		waitRunning("web")
		u, _ := url.Parse(admin.base + fmt.Sprintf("/portForward/%s/web", ns))
		// Like kubectl, a forwarder ends at its first failed connection
		// (the program may not listen yet): each try makes a new one.
		g.Eventually(func() (string, error) {
			tr, upgrader, err := spdy.RoundTripperFor(admin.cfg)
			if err != nil {
				return "", err
			}
			stop, ready := make(chan struct{}), make(chan struct{})
			defer close(stop)
			fw, err := portforward.New(spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u), []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
			if err != nil {
				return "", err
			}
			go func() { _ = fw.ForwardPorts() }()
			<-ready
			ports, err := fw.GetPorts()
			if err != nil {
				return "", err
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/ready", ports[0].Local))
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return string(b), err
		}).WithTimeout(10 * time.Second).Should(Equal("ok\n"))
	})

	t.Run("/pods and /healthz", func(t *testing.T) {
		g := NewWithT(t)
		code, body, err := admin.get("/pods")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring(`"kind":"PodList"`))
		g.Expect(body).To(ContainSubstring(`"name":"sh"`))
		_, body, _ = admin.get("/healthz")
		g.Expect(body).To(Equal("ok"))
	})

	t.Run("/logs/ lists the node's log folder and serves its files, as the kubelet serves /var/log", func(t *testing.T) {
		g := NewWithT(t)
		code, body, err := admin.get("/logs/")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring(`href="pods/"`))
		code, body, _ = admin.get("/logs/pods/")
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(ContainSubstring(ns + "_sh_"))
		code, _, _ = admin.get("/logs/no-such-file")
		g.Expect(code).To(Equal(http.StatusNotFound))
	})

	t.Run("callers are authenticated and authorized as by a kubelet", func(t *testing.T) {
		g := NewWithT(t)
		code, _, err := newKubeletClient(t, node, caCert, caKey, "").get("/pods")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(code).To(Equal(http.StatusUnauthorized), "no credentials")
		otherCA, otherKey, _ := certs.NewCA("other", time.Now(), time.Hour)
		stranger := newKubeletClient(t, node, caCert, caKey, "")
		certPEM, keyPEM, _ := certs.NewClient(otherCA, otherKey, "mallory", []string{"system:masters"}, time.Now(), time.Hour)
		stranger.cfg.CertData, stranger.cfg.KeyData = certPEM, keyPEM
		stranger.http, _ = rest.HTTPClientFor(stranger.cfg)
		code, _, _ = stranger.get("/pods")
		g.Expect(code).To(Equal(http.StatusUnauthorized), "a certificate of another CA")
		code, body, _ := newKubeletClient(t, node, caCert, caKey, "nobody").get("/pods")
		g.Expect(code).To(Equal(http.StatusForbidden), "a user without nodes/proxy")
		g.Expect(body).To(ContainSubstring("user=nobody"))
		_, _, err = newKubeletClient(t, node, caCert, caKey, "nobody").exec(execPath(ns, "sh", "c", false, false, "true"), nil, false)
		g.Expect(err).To(HaveOccurred(), "exec without nodes/proxy")

		// ServiceAccount tokens, reviewed by the API server: refused
		// without nodes/proxy, served with it.
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-nodes-proxy"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, Verbs: []string{"get", "create"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-nodes-proxy"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "debugger"}}}
		g.Expect(env.Client.Create(ctx, role)).To(Succeed())
		g.Expect(env.Client.Create(ctx, binding)).To(Succeed())
		withToken := func(name string) *kubeletClient {
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			g.Expect(env.Client.Create(ctx, sa)).To(Succeed())
			tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
			g.Expect(env.Client.SubResource("token").Create(ctx, sa, tr)).To(Succeed())
			k := newKubeletClient(t, node, caCert, caKey, "")
			k.cfg.BearerToken = tr.Status.Token
			k.http, _ = rest.HTTPClientFor(k.cfg)
			return k
		}
		code, _, _ = withToken("bystander").get("/healthz")
		g.Expect(code).To(Equal(http.StatusForbidden), "a ServiceAccount without nodes/proxy")
		debugger := withToken("debugger")
		g.Eventually(func() int {
			code, _, _ := debugger.get("/healthz")
			return code
		}).Should(Equal(http.StatusOK), "a ServiceAccount granted nodes/proxy")
	})

	t.Run("an exec readiness probe decides readiness", func(t *testing.T) {
		g := NewWithT(t)
		p := shell("probed", "trap 'exit 0' TERM; while :; do sleep 0.2; done")
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1,
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/ready"}}}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		waitRunning("probed")
		g.Consistently(func() bool {
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return podReady(p)
		}).WithTimeout(2 * time.Second).Should(BeFalse())
		_, _, err := admin.exec(execPath(ns, "probed", "c", false, false, "touch", "/tmp/ready"), nil, false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() bool {
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return podReady(p)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
	})

	t.Run("a terminating Pod whose readiness probe fails turns unready while it runs out its grace period", func(t *testing.T) {
		g := NewWithT(t)
		// As agnhost netexec --delay-shutdown: on SIGTERM it fails its
		// readiness and keeps serving.
		p := shell("draining", "trap 'touch /tmp/draining' TERM; while :; do sleep 0.2; done")
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1,
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "!", "-e", "/tmp/draining"}}}}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		g.Eventually(func() bool {
			_ = env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return podReady(p)
		}).WithTimeout(10 * time.Second).Should(BeTrue())
		g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed(), "the Pod is still there, terminating")
			g.Expect(p.DeletionTimestamp).NotTo(BeNil())
			g.Expect(podReady(p)).To(BeFalse())
			g.Expect(p.Status.ContainerStatuses[0].State.Running).NotTo(BeNil(), "its container still runs")
		}).WithTimeout(10 * time.Second).Should(Succeed())
		g.Consistently(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed(), "the Pod stays for its grace period; events: %s", podEvents(ctx, env, p))
			g.Expect(podReady(p)).To(BeFalse())
		}).WithTimeout(3 * time.Second).Should(Succeed())
		g.Expect(env.Client.Delete(ctx, p, client.GracePeriodSeconds(0))).To(Succeed())
	})

	t.Run("hostNetwork runs on the node; hostPorts reach the Pod from outside and from the node", func(t *testing.T) {
		g := NewWithT(t)
		host := shell("host", "trap 'exit 0' TERM; while :; do sleep 0.2; done")
		host.Spec.HostNetwork = true
		g.Expect(env.Client.Create(ctx, host)).To(Succeed())
		h := waitRunning("host")
		g.Expect(h.Status.PodIP).To(Equal(n.IP.String()))
		out, _, err := admin.exec(execPath(ns, "host", "c", false, false, "hostname"), nil, false)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(Equal("node-1\n"), "a hostNetwork Pod has its node's hostname")

		web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hostport"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "svcnet.test/probeapp", Ports: []corev1.ContainerPort{
				{ContainerPort: 8080, HostPort: 30080},
				{ContainerPort: 8080, HostPort: 30081, HostIP: "127.0.0.1"},
			}}},
		}}
		g.Expect(env.Client.Create(ctx, web)).To(Succeed())
		waitRunning("hostport")
		from := netlab.Client(client1, 2*time.Second)
		g.Eventually(func() (string, error) {
			return netlab.Get(ctx, from, fmt.Sprintf("http://%s:30080/ready", n.IP))
		}).WithTimeout(10*time.Second).Should(Equal("ok\n"), "from outside the node")
		local := netlab.Client(n.NetNS, 2*time.Second)
		g.Expect(netlab.Get(ctx, local, fmt.Sprintf("http://%s:30080/ready", n.IP))).To(Equal("ok\n"), "from the node itself")
		g.Expect(netlab.Get(ctx, local, "http://127.0.0.1:30081/ready")).To(Equal("ok\n"), "a loopback hostIP, from the node")
		_, err = netlab.Get(ctx, from, fmt.Sprintf("http://%s:30081/ready", n.IP))
		g.Expect(err).To(HaveOccurred(), "a loopback hostIP is not the node's address")
		g.Expect(env.Client.Delete(ctx, web, client.GracePeriodSeconds(0))).To(Succeed())
		g.Eventually(func() error {
			_, err := netlab.Get(ctx, from, fmt.Sprintf("http://%s:30080/ready", n.IP))
			return err
		}).WithTimeout(10*time.Second).Should(HaveOccurred(), "the mapping goes with the Pod")
	})
}

// podEvents are the messages of the Events about pod, for failures.
func podEvents(ctx context.Context, env *testenv.Env, pod *corev1.Pod) string {
	var list eventsv1.EventList
	if err := env.Client.List(ctx, &list, client.InNamespace(pod.Namespace)); err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.UID == pod.UID {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return strings.Join(out, "; ")
}
