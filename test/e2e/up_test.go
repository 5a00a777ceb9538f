// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/harness/proctree"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	upTimeout   = 150 * time.Second // start-up includes CoreDNS's first readiness period
	stopTimeout = 40 * time.Second
)

var (
	buildOnce sync.Once
	svcnetBin string
	buildErr  error
)

// svcnet builds the binary once per test run, and svcnet-up beside it
// (`svcnet up` hands over to it).
func svcnet(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "svcnet-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		svcnetBin = filepath.Join(dir, "svcnet")
		out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/svcnet-io/svcnet/cmd/svcnet", "github.com/svcnet-io/svcnet/cmd/svcnet-agent", "github.com/svcnet-io/svcnet/cmd/svcnet-up").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return svcnetBin
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// upProcess is a running `svcnet up`.
type upProcess struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	ready  chan struct{}
	exited chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func upArgs(t *testing.T, dataDir string) []string {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := freePorts(t, 4)
	return []string{"up", "--nodes=0", "--data-dir", dataDir, "--k8s-bin-dir", bins, "--images-dir", filepath.Join(filepath.Dir(bins), "images"),
		"--apiserver-port", strconv.Itoa(p[0]), "--etcd-client-port", strconv.Itoa(p[1]), "--etcd-peer-port", strconv.Itoa(p[2]), "--webhook-port", strconv.Itoa(p[3])}
}

func startUp(t *testing.T, args []string) *upProcess {
	t.Helper()
	cmd := exec.Command(svcnet(t), args...)
	out := &syncBuffer{}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = out
	up := &upProcess{cmd: cmd, out: out, ready: make(chan struct{}), exited: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
			if strings.Contains(sc.Text(), "The control plane is up") {
				once.Do(func() { close(up.ready) })
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		up.exited <- err
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-up.ready:
	case err := <-up.exited:
		t.Fatalf("svcnet up exited before it was ready: %v\n%s", err, out)
	case <-time.After(upTimeout):
		t.Fatalf("svcnet up not ready after %s:\n%s", upTimeout, out)
	}
	return up
}

// alive reports whether pid still exists. A zombie counts until it is
// reaped: a multi-threaded process is a zombie while its other threads
// still exit, holding its sockets.
func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	var left []int
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, stopTimeout, true, func(context.Context) (bool, error) {
		left = slices.DeleteFunc(slices.Clone(pids), func(p int) bool { return !alive(p) })
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("processes left behind: %v", left)
	}
}

func kubeClient(t *testing.T, dataDir string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientset is a client-go clientset for the cluster of dataDir (for
// what controller-runtime's client does not do: logs, discovery).
func clientset(t *testing.T, dataDir string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestUp(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	args := upArgs(t, dataDir)
	up := startUp(t, args)

	// kubectl answers with the kubeconfig `svcnet up` wrote.
	bins, _ := testenv.BinDir()
	out, err := exec.Command(filepath.Join(bins, "kubectl"), "--kubeconfig", filepath.Join(dataDir, "kubeconfig"),
		"get", "servicecidrs,ipaddresses").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "servicecidr.networking.k8s.io/kubernetes") {
		t.Fatalf("kubectl get servicecidrs,ipaddresses: %v\n%s", err, out)
	}

	// The manager svcnet up runs publishes slices.
	ctx := context.Background()
	c := kubeClient(t, dataDir)
	svc := builder.Service("web", "default").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").Obj()
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list discoveryv1.EndpointSliceList
		err := c.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "web"})
		return err == nil && len(list.Items) == 1, nil
	}); err != nil {
		t.Fatal("no EndpointSlice for Service web: the svcnet manager in svcnet up is not working")
	}

	// A second svcnet up on the same data dir is refused.
	second := exec.Command(svcnet(t), upArgs(t, dataDir)...)
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "in use by another svcnet up") {
		t.Errorf("second svcnet up on the same data dir: err=%v, output:\n%s", err, out)
	}

	// SIGTERM stops every child.
	kids := proctree.Descendants(up.cmd.Process.Pid)
	if len(kids) < 3 {
		t.Fatalf("want etcd, kube-apiserver and kube-controller-manager below svcnet up, found pids %v", kids)
	}
	stopUp(t, up)

	// A restart keeps the objects; a crash (SIGKILL) still leaves no child.
	up = startUp(t, args)
	var got corev1.Service
	if err := kubeClient(t, dataDir).Get(ctx, client.ObjectKeyFromObject(svc), &got); err != nil {
		t.Fatalf("Service created before the restart: %v", err)
	}
	if got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("ClusterIP changed across restart: %s -> %s", svc.Spec.ClusterIP, got.Spec.ClusterIP)
	}
	kids = proctree.Descendants(up.cmd.Process.Pid)
	if err := up.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-up.exited; err == nil {
		t.Error("svcnet up exited cleanly after SIGKILL")
	}
	waitGone(t, kids)
}

func TestUpBadInput(t *testing.T) {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	cases := map[string]struct {
		args []string
		want string
	}{
		"unknown controller": {
			args: []string{"manager", "--controllers=bogus"},
			want: `unknown controller "bogus"; valid names: announcement, clusterip, endpointslice, endpointslicemirroring, ipaddress, loadbalancer, nodeport, servicecidr`,
		},
		"missing Kubernetes binaries": {
			args: []string{"up", "--k8s-bin-dir", t.TempDir(), "--data-dir", t.TempDir()},
			want: "run `make k8s-bins`",
		},
		"data dir that cannot be created": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", filepath.Join(file, "sub")},
			want: "--data-dir " + filepath.Join(file, "sub") + " cannot be created",
		},
		"port already in use": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--apiserver-port", busyPort},
			want: "port " + busyPort + " for kube-apiserver (--apiserver-port) is already in use",
		},
		"bad service range": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--service-cluster-ip-range", "10.96.0.0/33"},
			want: "--service-cluster-ip-range",
		},
		"negative node count": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--nodes=-1"},
			want: "--nodes must be between 0 and 50, got -1",
		},
		"Pod range overlapping the Service range": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--cluster-cidr", "10.96.0.0/12"},
			want: "--cluster-cidr 10.96.0.0/12 overlaps --service-cluster-ip-range 10.96.0.0/16",
		},
		"unknown install": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--install=kubectl"},
			want: `--install "kubectl" is not valid; valid values: in-process, manifests, helm`,
		},
		"manifests without nodes": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--nodes=0", "--install=manifests"},
			want: "--install=manifests needs nodes to run the manifests (--nodes) and --pipeline=svcnet",
		},
		"helm without nodes": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--nodes=0", "--install=helm"},
			want: "--install=helm needs nodes to run the manifests (--nodes) and --pipeline=svcnet",
		},
		"walkthrough without nodes": {
			args: []string{"up", "--k8s-bin-dir", bins, "--data-dir", t.TempDir(), "--nodes=0", "--demo"},
			want: "--demo needs at least one node",
		},
		"bad max endpoints per slice": {
			args: []string{"manager", "--max-endpoints-per-slice", "1001"},
			want: "MaxEndpointsPerSlice (--max-endpoints-per-slice) must be between 1 and 1000",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(svcnet(t), tc.args...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("svcnet %v succeeded, want an error", tc.args)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("svcnet %v said:\n%s\nwant it to mention %q", tc.args, out, tc.want)
			}
			if lines := strings.Count(strings.TrimSpace(string(out)), "\n"); lines > 3 {
				t.Errorf("want a short error, got %d lines:\n%s", lines+1, out)
			}
		})
	}
}
