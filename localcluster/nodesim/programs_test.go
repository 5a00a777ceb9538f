// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// probeAppImage builds testdata/probeapp, static, into the root of the
// image of TestPrograms, which holds nothing but the program, as an
// image's layers hold it (the container's root is an overlay over it).
// Folder and program get an image's modes whatever the umask.
func probeAppImage(t *testing.T) images.Image {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	out := filepath.Join(root, "probeapp")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/probeapp")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe app: %v\n%s", err, b)
	}
	for _, p := range []string{root, out} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return images.Image{Name: "probeapp", Repositories: []string{"svcnet.test/probeapp"},
		Config: images.Config{Entrypoint: []string{"/probeapp"}}, Rootfs: root}
}

// TestPrograms runs a Program against a real API server in a real Pod
// namespace: the kubelet's files and environment, readiness from the
// probe, restarts with back-off, a finished Pod, and a sandbox that leaves
// the host's files alone.
func TestPrograms(t *testing.T) {
	privateNS.Require(t)
	g := NewWithT(t)
	ctx := context.Background()
	env, lab, _ := startEnvAndLab(t, "pg")
	n, err := lab.AddNode("node-1", netip.MustParsePrefix("172.31.0.11/24"), netip.MustParsePrefix("10.244.1.0/24"))
	g.Expect(err).NotTo(HaveOccurred())
	logDir := t.TempDir()
	hostResolv, _ := os.ReadFile("/etc/resolv.conf")

	store := &images.Store{}
	store.Add(probeAppImage(t))
	runSimulator(t, env, Options{
		Nodes:          []Node{{Name: n.Name, Zone: "zone-a", Net: n}},
		Images:         store,
		PodsDir:        t.TempDir(),
		LogDir:         logDir,
		DNS:            DNS{Servers: []netip.Addr{netip.MustParseAddr("10.96.0.10")}},
		RestartBackoff: 2 * time.Second,
	})

	ns, err := env.Namespace(ctx, "prog")
	g.Expect(err).NotTo(HaveOccurred())
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config"}, Data: map[string]string{"config": "first"}},
		// What kube-controller-manager's root-ca-cert-publisher writes.
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "the cluster CA"}},
	} {
		g.Expect(env.Client.Create(ctx, obj)).To(Succeed())
	}
	pod := func(name string, policy corev1.RestartPolicy) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{
			ServiceAccountName: "app",
			RestartPolicy:      policy,
			Containers: []corev1.Container{{
				Name: "app", Image: "svcnet.test/probeapp:v1",
				Args:  []string{"-listen", ":$(PORT)"},
				Env:   []corev1.EnvVar{{Name: "PORT", Value: "8080"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
					PeriodSeconds: 1, FailureThreshold: 1,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/etc/app"},
					{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				},
			}},
			// The volumes as the ServiceAccount admission plugin adds them.
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
		}}
	}
	current := func(g Gomega, name string) *corev1.Pod {
		var p corev1.Pod
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p)).To(Succeed())
		return &p
	}
	web := netlab.Client(n.NetNS, 2*time.Second)
	call := func(p *corev1.Pod, path string) (string, error) {
		return netlab.Get(ctx, web, fmt.Sprintf("http://%s:8080%s", p.Status.PodIP, path))
	}
	// describePod is what a test that waited for a Pod in vain shows: the
	// Pod's status and its container's last log.
	describePod := func(name string) string {
		var p corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			return fmt.Sprintf("Pod %s: %v", name, err)
		}
		status, _ := json.MarshalIndent(p.Status, "", "  ")
		restarts := int32(0)
		if len(p.Status.ContainerStatuses) > 0 {
			restarts = p.Status.ContainerStatuses[0].RestartCount
		}
		log, err := os.ReadFile(container.LogPath(logDir, ns, name, string(p.UID), "app", restarts))
		if err != nil {
			log = []byte(err.Error())
		}
		return fmt.Sprintf("Pod %s, status:\n%s\nlog of restart %d:\n%s", name, status, restarts, log)
	}
	// deleteAtEnd deletes a subtest's Pod when it ends, passed or failed,
	// so that no program of it outlives it.
	deleteAtEnd := func(t *testing.T, name string) {
		t.Cleanup(func() {
			err := env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0))
			if client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting Pod %s: %v", name, err)
			}
		})
	}
	type info struct {
		Args                                                  []string
		Env                                                   []string
		Hostname, Token, CA, Namespace, Config, Resolv, Hosts string
		UID                                                   int
		CapEff                                                string
		Writable                                              map[string]bool
	}
	readInfo := func(g Gomega, p *corev1.Pod) info {
		body, err := call(p, "/info")
		g.Expect(err).NotTo(HaveOccurred())
		var i info
		g.Expect(json.Unmarshal([]byte(body), &i)).To(Succeed())
		return i
	}

	g.Expect(env.Client.Create(ctx, pod("app", corev1.RestartPolicyAlways))).To(Succeed())
	var app1 *corev1.Pod
	g.Eventually(func(g Gomega) {
		app1 = current(g, "app")
		g.Expect(podReady(app1)).To(BeTrue())
	}).WithTimeout(20*time.Second).Should(Succeed(), "Ready once the readiness probe passes")

	t.Run("the container sees what a kubelet gives it", func(t *testing.T) {
		g := NewWithT(t)
		i := readInfo(g, app1)
		g.Expect(i.Args).To(Equal([]string{"/probeapp", "-listen", ":8080"}), "args with $(PORT) expanded")
		g.Expect(i.Env).To(ContainElements("KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "PORT=8080", "HOSTNAME=app"))
		g.Expect(i.Hostname).To(Equal("app"))
		g.Expect(i.Config).To(Equal("first"))
		g.Expect(i.CA).To(Equal("the cluster CA"))
		g.Expect(i.Namespace).To(Equal(ns))
		g.Expect(i.Resolv).To(Equal(fmt.Sprintf("nameserver 10.96.0.10\nsearch %s.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n", ns)))
		g.Expect(i.Hosts).To(ContainSubstring(app1.Status.PodIP + "\tapp\n"))
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: i.Token}}
		g.Expect(env.Client.Create(ctx, review)).To(Succeed())
		g.Expect(review.Status.Authenticated).To(BeTrue(), "the token is the API server's: %s", review.Status.Error)
		g.Expect(review.Status.User.Username).To(Equal("system:serviceaccount:" + ns + ":app"))
		g.Expect(review.Status.User.Extra).To(HaveKeyWithValue("authentication.kubernetes.io/pod-name", authenticationv1.ExtraValue{"app"}), "bound to the Pod")

		g.Expect(os.ReadFile("/etc/resolv.conf")).To(Equal(hostResolv), "the host's resolv.conf is untouched")
		_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
		g.Expect(os.IsNotExist(err)).To(BeTrue(), "the token is mounted only inside the container")
	})

	t.Run("the securityContext holds: user, capabilities, a read-only root", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(readInfo(g, app1).CapEff).To(Equal("00000000a80425fb"), "a runtime's default capabilities")
		restricted := func(name string, sc *corev1.SecurityContext) *corev1.Pod {
			p := pod(name, corev1.RestartPolicyAlways)
			p.Spec.Containers[0].SecurityContext = sc
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"})
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			return p
		}
		for _, p := range []*corev1.Pod{
			restricted("nonroot", &corev1.SecurityContext{RunAsUser: ptr.To[int64](65532), RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)}),
			restricted("netadmin", &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}}),
		} {
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			deleteAtEnd(t, p.Name)
		}
		infoOf := func(name string) info {
			var i info
			g.Eventually(func(g Gomega) {
				p := current(g, name)
				g.Expect(podReady(p)).To(BeTrue())
				i = readInfo(g, p)
			}).WithTimeout(20*time.Second).Should(Succeed(), func() string { return describePod(name) })
			return i
		}
		nonroot := infoOf("nonroot")
		g.Expect(nonroot.UID).To(Equal(65532))
		g.Expect(nonroot.CapEff).To(Equal("0000000000000000"))
		g.Expect(nonroot.Token).NotTo(HavePrefix("error"), "the token is readable by the container's user")
		g.Expect(nonroot.Writable).To(Equal(map[string]bool{"/": false, "/scratch": true}), "read-only root, writable emptyDir")
		netadmin := infoOf("netadmin")
		g.Expect(netadmin.UID).To(Equal(0))
		g.Expect(netadmin.CapEff).To(Equal("0000000000003000"), "NET_ADMIN and NET_RAW only")
		g.Expect(netadmin.Writable["/"]).To(BeTrue())

		bad := pod("rootnonroot", corev1.RestartPolicyAlways)
		bad.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}
		g.Expect(env.Client.Create(ctx, bad)).To(Succeed())
		deleteAtEnd(t, bad.Name)
		g.Eventually(func(g Gomega) {
			p := current(g, "rootnonroot")
			g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
			st := p.Status.ContainerStatuses[0]
			msg := ""
			if st.State.Waiting != nil {
				msg = st.State.Waiting.Message
			}
			if st.LastTerminationState.Terminated != nil {
				msg += st.LastTerminationState.Terminated.Message
			}
			g.Expect(msg).To(ContainSubstring("runAsNonRoot"))
		}).WithTimeout(20*time.Second).Should(Succeed(), "runAsNonRoot with a root user does not start")
	})

	t.Run("a ConfigMap change reaches the mounted file", func(t *testing.T) {
		g := NewWithT(t)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config"}, Data: map[string]string{"config": "second"}}
		g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) { g.Expect(readInfo(g, app1).Config).To(Equal("second")) }).WithTimeout(30 * time.Second).Should(Succeed())
	})

	t.Run("a failing readiness probe makes the Pod not Ready", func(t *testing.T) {
		g := NewWithT(t)
		_, err := call(app1, "/unready")
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func(g Gomega) { g.Expect(podReady(current(g, "app"))).To(BeFalse()) }).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("an exit restarts the container, with the back-off from the second restart on", func(t *testing.T) {
		g := NewWithT(t)
		for want := int32(1); want <= 2; want++ {
			_, _ = call(app1, "/exit?code=3")
			var p *corev1.Pod
			g.Eventually(func(g Gomega) {
				p = current(g, "app")
				g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
				cs := p.Status.ContainerStatuses[0]
				g.Expect(cs.RestartCount).To(Equal(want))
				g.Expect(cs.State.Running).NotTo(BeNil())
				g.Expect(podReady(p)).To(BeTrue(), "a new process starts ready again")
			}).WithTimeout(20 * time.Second).Should(Succeed())
			cs := p.Status.ContainerStatuses[0]
			g.Expect(cs.LastTerminationState.Terminated).NotTo(BeNil())
			g.Expect(cs.LastTerminationState.Terminated.ExitCode).To(BeEquivalentTo(3))
			if want == 2 {
				gap := cs.State.Running.StartedAt.Sub(cs.LastTerminationState.Terminated.FinishedAt.Time)
				g.Expect(gap).To(BeNumerically(">=", time.Second), "the second restart waits for the back-off")
			}
		}
		log, err := os.ReadFile(container.LogPath(logDir, ns, "app", string(app1.UID), "app", 1))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(log).NotTo(BeNil())
	})

	t.Run("a Never Pod whose program exits 0 Succeeds", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(env.Client.Create(ctx, pod("once", corev1.RestartPolicyNever))).To(Succeed())
		var p *corev1.Pod
		g.Eventually(func(g Gomega) {
			p = current(g, "once")
			g.Expect(podReady(p)).To(BeTrue())
		}).WithTimeout(20 * time.Second).Should(Succeed())
		_, _ = call(p, "/exit?code=0")
		g.Eventually(func(g Gomega) { g.Expect(current(g, "once").Status.Phase).To(Equal(corev1.PodSucceeded)) }).WithTimeout(10 * time.Second).Should(Succeed())
	})

	t.Run("deleting the Pod ends its program", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(env.Client.Delete(ctx, app1, client.GracePeriodSeconds(1))).To(Succeed())
		g.Eventually(func() error {
			_, err := netlab.Get(ctx, web, fmt.Sprintf("http://%s:8080/ready", app1.Status.PodIP))
			return err
		}).WithTimeout(20 * time.Second).Should(HaveOccurred())
		out, err := exec.Command("pgrep", "-x", "probeapp").CombinedOutput()
		g.Expect(err).To(HaveOccurred(), "no probe app left running: %s", strings.TrimSpace(string(out)))
	})
}
