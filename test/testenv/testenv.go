// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package testenv starts a real etcd + kube-apiserver (envtest) from the
// binaries `make k8s-bins` builds into bin/k8s, with the Service ranges and
// feature gates a suite asks for, and runs svcnet's controllers against it
// through the same controllers.Setup that production uses.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// Options selects how the API server is started.
type Options struct {
	// ServiceCIDRs is --service-cluster-ip-range; one range, or an IPv4 and
	// an IPv6 one separated by a comma. Empty: 10.96.0.0/16.
	ServiceCIDRs string
	// NodePortRange is --service-node-port-range. Empty: 30000-32767.
	NodePortRange string
	// FeatureGates is --feature-gates, e.g. "Foo=true".
	FeatureGates string
}

// Env is a running API server with an admin client.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	env    *envtest.Environment
	// nodePortRange is the API server's, which the manager must share.
	nodePortRange string
	// The manager StartWithManager runs, for StopManager/RestartManager.
	managerOpts controllers.Options
	stopManager func()
}

// BinDir finds the folder of the Kubernetes binaries: $KUBEBUILDER_ASSETS,
// else bin/k8s at the root of this module.
func BinDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bins := filepath.Join(dir, "bin", "k8s")
			if _, err := os.Stat(filepath.Join(bins, "kube-apiserver")); err != nil {
				return "", fmt.Errorf("no kube-apiserver in %s: run `make k8s-bins` (or set KUBEBUILDER_ASSETS)", bins)
			}
			return bins, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory; set KUBEBUILDER_ASSETS")
		}
		dir = parent
	}
}

// ModuleBinDir returns bin/<name> at the root of this module, where
// `make <name>` builds a peer's programs (bin/metallb, bin/prometheus),
// and fails unless it holds file.
func ModuleBinDir(name, file string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bins := filepath.Join(dir, "bin", name)
			if _, err := os.Stat(filepath.Join(bins, file)); err != nil {
				return "", fmt.Errorf("no %s in %s: run `make %s`", file, bins, name)
			}
			return bins, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start starts etcd and kube-apiserver.
func Start(opts Options) (*Env, error) {
	bins, err := BinDir()
	if err != nil {
		return nil, err
	}
	sch := scheme.New()
	crds, err := svcnetconfig.CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDs:                     crds,
		BinaryAssetsDirectory:    bins,
		Scheme:                   sch,
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("service-cluster-ip-range", orDefault(opts.ServiceCIDRs, "10.96.0.0/16"))
	nodePorts := orDefault(opts.NodePortRange, "30000-32767")
	args.Set("service-node-port-range", nodePorts)
	// Works the same in a private network namespace with only loopback,
	// where the API server finds no default route to advertise.
	args.Set("advertise-address", "127.0.0.1")
	args.Set("endpoint-reconciler-type", "none")
	if opts.FeatureGates != "" {
		args.Set("feature-gates", opts.FeatureGates)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest from %s: %w", bins, err)
	}
	cfg.QPS = 1000
	cfg.Burst = 2000
	c, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: sch, env: env, nodePortRange: nodePorts}, nil
}

// StartWithManager starts the API server and svcnet's manager with m,
// for suites that test controllers: Stop stops both, and StopManager and
// RestartManager let a test see what happens while svcnet is down.
func StartWithManager(opts Options, m controllers.Options) (*Env, error) {
	e, err := Start(opts)
	if err != nil {
		return nil, err
	}
	e.managerOpts = m
	if err := e.RestartManager(); err != nil {
		_ = e.env.Stop()
		return nil, err
	}
	return e, nil
}

// StopManager stops the manager StartWithManager started, if it runs.
func (e *Env) StopManager() {
	if e.stopManager != nil {
		e.stopManager()
		e.stopManager = nil
	}
}

// RestartManager (re)starts the manager with StartWithManager's options.
func (e *Env) RestartManager() error {
	e.StopManager()
	stop, err := e.StartManager(e.managerOpts)
	if err != nil {
		return err
	}
	e.stopManager = stop
	return nil
}

// Stop stops the manager, if StartWithManager started one, the API server
// and etcd.
func (e *Env) Stop() error {
	e.StopManager()
	return e.env.Stop()
}

// EtcdURL is the client address of the API server's etcd, for benchmarks
// that load large worlds straight into storage.
func (e *Env) EtcdURL() string {
	return e.env.ControlPlane.Etcd.URL.String()
}

// Namespace creates a fresh namespace named after prefix.
func (e *Env) Namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: sanitize(prefix) + "-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return "", err
	}
	return ns.Name, nil
}

// StartManager runs svcnet's manager, with the controllers opts selects,
// through the same manager.New as `svcnet manager`. When they allocate at
// admission, the webhook is served on loopback with svcnet's own
// certificates and the generated MutatingWebhookConfiguration is installed
// (by URL); StartManager returns once the manager reports ready, so tests
// never race the webhook. stop ends the manager.
func (e *Env) StartManager(opts controllers.Options) (stop func(), err error) {
	o := manager.DefaultOptions()
	// Settings a suite leaves at zero get the defaults in controllers.Setup;
	// the node port range is the test API server's.
	if opts.NodePort.Range == "" {
		opts.NodePort.Range = e.nodePortRange
	}
	o.Controllers = opts
	o.MetricsBindAddress = "0"
	o.KubeAPIQPS, o.KubeAPIBurst = 1000, 2000
	o.SkipNameValidation = true // suites restart managers in one process
	healthPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", healthPort)
	if controllers.NeedsWebhook(opts.Controllers) {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "svcnet-webhook-")
		if err != nil {
			return nil, err
		}
		o.Webhook.Host, o.Webhook.Port, o.Webhook.CertDir = "127.0.0.1", port, dir
		o.Webhook.SecretNamespace = "kube-system"
		o.Webhook.ExtraHosts = []string{"127.0.0.1"}
		if err := svcnetconfig.InstallWebhook(context.Background(), e.Client, fmt.Sprintf("https://127.0.0.1:%d", port)); err != nil {
			return nil, err
		}
	}
	c, err := o.Complete()
	if err != nil {
		return nil, err
	}
	mgr, err := manager.New(e.Config, c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	exited := make(chan struct{}) // closed when the manager returns
	go func() {
		runErr = mgr.Start(ctx)
		close(exited)
	}()
	stop = func() {
		cancel()
		<-exited
		if runErr != nil {
			fmt.Fprintln(os.Stderr, "testenv: manager stopped with:", runErr)
		}
		if o.Webhook.CertDir != "" {
			_ = os.RemoveAll(o.Webhook.CertDir) // the webhook's certificates go with it
		}
	}
	if err := waitReady(ctx, healthPort, exited); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits for the manager's /readyz, giving up when it exits.
func waitReady(ctx context.Context, port int, exited <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := WaitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 60*time.Second); err != nil {
		return fmt.Errorf("manager not ready: %w", err)
	}
	return nil
}

// WaitHTTP polls url until it answers 200 OK, timeout passes or ctx ends.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not OK after %v", url, timeout)
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return strings.Trim(b.String(), "-")
}

// CreatePod creates a Pod and then writes the status it was built with
// (the API server drops status on create; there is no kubelet to set it).
func (e *Env) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	status := pod.Status
	if err := e.Client.Create(ctx, pod); err != nil {
		return err
	}
	if equalZeroStatus(status) {
		return nil
	}
	pod.Status = status
	return e.Client.Status().Update(ctx, pod)
}

func equalZeroStatus(s corev1.PodStatus) bool {
	return s.Phase == "" && s.PodIP == "" && len(s.Conditions) == 0
}

// WatchClient returns a client that can open watches, for tests that must
// see every intermediate state rather than poll.
func (e *Env) WatchClient() client.WithWatch {
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		panic(err) // the same config already made e.Client
	}
	return c
}

// WriteKubeconfig writes a kubeconfig of a cluster-admin user to path, for
// processes (the svcnet binary, upstream controllers) run against the
// environment.
func (e *Env) WriteKubeconfig(path string) error {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: "svcnet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	b, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Parallel runs f(0), ..., f(n-1) on 32 workers, for creating many objects
// quickly, and returns the first error.
func Parallel(n int, f func(i int) error) error {
	errs := make(chan error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// Events returns the events.k8s.io Events that reporter (a
// reportingController) wrote about the object with uid with reason. Naming
// the reporter matters: kube-apiserver's own repair loops report some of the
// same findings.
func (e *Env) Events(ctx context.Context, reporter string, uid types.UID, reason string) ([]eventsv1.Event, error) {
	var list eventsv1.EventList
	if err := e.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.ReportingController == reporter && ev.Regarding.UID == uid && ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out, nil
}
