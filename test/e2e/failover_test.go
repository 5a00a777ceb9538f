// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const (
	failoverServices = 1000
	failoverWorkers  = 32
	// repairBound is how long after the new leader is ready the
	// Service <-> IPAddress picture must be whole.
	repairBound = 30 * time.Second
)

// replica is one `svcnet manager` process of the failover test.
type replica struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	readyz  string
	webhook string
	done    chan struct{}
}

func startReplica(t *testing.T, kubeconfig, dir, name string, extraArgs ...string) *replica {
	t.Helper()
	ports := freePorts(t, 3)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"manager", "--kubeconfig=" + kubeconfig,
		"--leader-elect", "--leader-elect-namespace=kube-system",
		"--controllers=clusterip,nodeport,ipaddress",
		"--metrics-bind-address=0", fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[0]),
		"--webhook-host=127.0.0.1", fmt.Sprintf("--webhook-port=%d", ports[1]),
		"--webhook-cert-dir=" + filepath.Join(dir, name+"-certs"), "--webhook-secret-namespace=kube-system",
		"--webhook-cert-extra-hosts=127.0.0.1", "--service-node-port-range=30000-32767"}, extraArgs...)
	cmd := exec.Command(svcnet(t), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, logPath: filepath.Join(dir, name+".log"), cmd: cmd, readyz: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0]), webhook: fmt.Sprintf("127.0.0.1:%d", ports[1]), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(r.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.done
	})
	return r
}

func (r *replica) ready() bool {
	select {
	case <-r.done:
		return false
	default:
	}
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get(r.readyz)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// readyProxy stands for the webhook Service: it forwards each connection
// to a replica that reports ready (only the leader does), as a Service's
// endpoints list only Ready Pods.
type readyProxy struct {
	l        net.Listener
	replicas []*replica
	mu       sync.Mutex
	target   string
}

func newReadyProxy(t *testing.T, replicas []*replica) *readyProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &readyProxy{l: l, replicas: replicas}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); l.Close() })
	go p.track(ctx)
	go p.serve()
	return p
}

func (p *readyProxy) track(ctx context.Context) {
	for ctx.Err() == nil {
		target := ""
		for _, r := range p.replicas {
			if r.ready() {
				target = r.webhook
			}
		}
		p.mu.Lock()
		p.target = target
		p.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *readyProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		go func() {
			defer c.Close()
			if target == "" {
				return // no ready endpoint: the call fails, failurePolicy Ignore applies
			}
			b, err := net.DialTimeout("tcp", target, time.Second)
			if err != nil {
				return
			}
			defer b.Close()
			go func() { _, _ = io.Copy(b, c) }()
			_, _ = io.Copy(c, b)
		}()
	}
}

// TestLeaderFailoverDuringBurst kills the leading manager replica during a
// burst of Service creates and checks that nothing is allocated twice,
// every accepted Service has its addresses, and the Service <-> IPAddress
// picture is whole soon after the new leader took over.
func TestLeaderFailoverDuringBurst(t *testing.T) {
	env, dir, kc := startAPIServer(t)
	ctx := context.Background()
	replicas := []*replica{startReplica(t, kc, dir, "a"), startReplica(t, kc, dir, "b")}
	proxy := newReadyProxy(t, replicas)
	if err := svcnetconfig.InstallWebhook(ctx, env.Client, "https://"+proxy.l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	leader := waitLeader(t, replicas, time.Minute)
	for _, r := range replicas {
		select {
		case <-r.done:
			b, _ := os.ReadFile(r.logPath)
			t.Fatalf("replica %s exited before the failover; its log:\n%s", r.name, b)
		default:
		}
	}
	ns, err := env.Namespace(ctx, "failover")
	if err != nil {
		t.Fatal(err)
	}

	var created, failed atomic.Int64
	var killedAt, newLeaderAt time.Time
	work := make(chan int)
	var wg sync.WaitGroup
	for range failoverWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				b := builder.Service(fmt.Sprintf("s%d", i), ns).Port("http", 80, intstr.FromInt32(8080)).Selector("app", "x")
				if i%2 == 1 {
					b = b.Type(corev1.ServiceTypeNodePort)
				}
				if err := env.Client.Create(ctx, b.Obj()); err != nil {
					failed.Add(1)
					t.Logf("create s%d: %v", i, err)
					continue
				}
				created.Add(1)
			}
		}()
	}
	for i := range failoverServices {
		if i == failoverServices/5 {
			killedAt = time.Now()
			if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		work <- i
	}
	close(work)
	wg.Wait()
	burstEnd := time.Now()
	waitLeader(t, replicas, 3*time.Minute)
	newLeaderAt = time.Now()

	var svcs corev1.ServiceList
	if err := env.Client.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if int64(len(svcs.Items)) != created.Load() {
		t.Errorf("%d Services exist, %d creates succeeded", len(svcs.Items), created.Load())
	}
	checkNoDuplicates(t, svcs.Items)
	var whole time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, repairBound, true, func(ctx context.Context) (bool, error) {
		var ips networkingv1.IPAddressList
		if err := env.Client.List(ctx, &ips); err != nil {
			return false, err
		}
		ok := consistent(svcs.Items, ips.Items) == ""
		whole = time.Since(newLeaderAt)
		return ok, nil
	}); err != nil {
		var ips networkingv1.IPAddressList
		_ = env.Client.List(ctx, &ips)
		t.Fatalf("%s after the new leader was ready: %s", repairBound, consistent(svcs.Items, ips.Items))
	}
	t.Logf("failover: %d of %d creates accepted, %d refused; the leader was killed after %d were queued, the burst ended %s later; "+
		"a new leader was ready %s after the kill; Services and IPAddresses were consistent %s after that",
		created.Load(), failoverServices, failed.Load(), failoverServices/5, burstEnd.Sub(killedAt).Round(time.Millisecond),
		newLeaderAt.Sub(killedAt).Round(time.Millisecond), whole.Round(time.Millisecond))
}

// startAPIServer starts a test API server for `svcnet manager` processes
// and writes their kubeconfig into the returned folder.
func startAPIServer(t *testing.T) (env *testenv.Env, dir, kubeconfig string) {
	t.Helper()
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: "10.96.0.0/16", NodePortRange: "30000-32767"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	dir = t.TempDir()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return env, dir, kubeconfig
}

func waitLeader(t *testing.T, replicas []*replica, timeout time.Duration) *replica {
	t.Helper()
	var leader *replica
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, r := range replicas {
			if r.ready() {
				leader = r
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		for _, r := range replicas {
			b, _ := os.ReadFile(r.logPath)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("replica %s's log ends:\n%s", r.name, b)
		}
		t.Fatalf("no manager replica became ready (the leader) within %s", timeout)
	}
	return leader
}

// checkNoDuplicates: no ClusterIP or nodePort is held by two Services, and
// every Service has its ClusterIP (and nodePort, for NodePort Services).
func checkNoDuplicates(t *testing.T, svcs []corev1.Service) {
	t.Helper()
	ips, ports := map[string]string{}, map[int32]string{}
	for _, s := range svcs {
		if s.Spec.ClusterIP == "" {
			t.Errorf("Service %s has no ClusterIP", s.Name)
		}
		if other, dup := ips[s.Spec.ClusterIP]; dup {
			t.Errorf("ClusterIP %s held by %s and %s", s.Spec.ClusterIP, other, s.Name)
		}
		ips[s.Spec.ClusterIP] = s.Name
		if s.Spec.Type != corev1.ServiceTypeNodePort {
			continue
		}
		np := s.Spec.Ports[0].NodePort
		if np == 0 {
			t.Errorf("NodePort Service %s has no nodePort", s.Name)
		}
		if other, dup := ports[np]; dup {
			t.Errorf("nodePort %d held by %s and %s", np, other, s.Name)
		}
		ports[np] = s.Name
	}
}

// consistent says what is wrong between the Services and the IPAddresses,
// or "": every ClusterIP has its IPAddress naming the Service, and every
// IPAddress of the namespace's Services names one that holds it.
func consistent(svcs []corev1.Service, ips []networkingv1.IPAddress) string {
	byIP := map[string]networkingv1.IPAddress{}
	for _, ip := range ips {
		byIP[ip.Name] = ip
	}
	held := map[string]string{}
	for _, s := range svcs {
		held[s.Namespace+"/"+s.Name] = s.Spec.ClusterIP
		ip, ok := byIP[s.Spec.ClusterIP]
		if !ok {
			return fmt.Sprintf("Service %s's ClusterIP %s has no IPAddress", s.Name, s.Spec.ClusterIP)
		}
		if ref := ip.Spec.ParentRef; ref == nil || ref.Namespace != s.Namespace || ref.Name != s.Name {
			return fmt.Sprintf("IPAddress %s does not name Service %s: %+v", ip.Name, s.Name, ip.Spec.ParentRef)
		}
	}
	ns := ""
	if len(svcs) > 0 {
		ns = svcs[0].Namespace
	}
	for _, ip := range ips {
		ref := ip.Spec.ParentRef
		if ref == nil || ref.Resource != "services" || ref.Namespace != ns {
			continue
		}
		if held[ref.Namespace+"/"+ref.Name] != ip.Name {
			return fmt.Sprintf("IPAddress %s names Service %s/%s, which does not hold it", ip.Name, ref.Namespace, ref.Name)
		}
	}
	return ""
}

// TestWebhookCertRotationUnderTraffic renews the webhook's serving
// certificate every few seconds while Services are created: every create
// is answered by svcnet's allocator (its choices are contiguous, where
// kube-apiserver alone, which failurePolicy Ignore would fall back to,
// picks at random), across the renewals (two or three in 12 s).
func TestWebhookCertRotationUnderTraffic(t *testing.T) {
	env, dir, kc := startAPIServer(t)
	ctx := context.Background()
	r := startReplica(t, kc, dir, "rotating", "--webhook-cert-validity=6s")
	if err := svcnetconfig.InstallWebhook(ctx, env.Client, "https://"+r.webhook); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, []*replica{r}, time.Minute)
	ns, err := env.Namespace(ctx, "rotation")
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "rotating-certs", "tls.crt")
	serving := func() string {
		b, _ := os.ReadFile(certFile)
		return string(b)
	}
	seen := map[string]bool{serving(): true}
	var ips []netip.Addr
	deadline := time.Now().Add(12 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		svc := builder.Service(fmt.Sprintf("s%d", i), ns).Port("http", 80, intstr.FromInt32(8080)).Selector("app", "x").Obj()
		if err := env.Client.Create(ctx, svc); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		ips = append(ips, netip.MustParseAddr(svc.Spec.ClusterIP))
		seen[serving()] = true
		time.Sleep(20 * time.Millisecond)
	}
	if len(seen) < 2 {
		t.Fatalf("the serving certificate was not renewed during the creates")
	}
	for i := 1; i < len(ips); i++ {
		if ips[i] != ips[i-1].Next() {
			t.Fatalf("create %d got %s after %s: not svcnet's choice, so the webhook was not answering (renewals: %d)", i, ips[i], ips[i-1], len(seen)-1)
		}
	}
	t.Logf("%d creates across %d certificate renewals, every one allocated by svcnet", len(ips), len(seen)-1)
}
