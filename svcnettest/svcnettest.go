// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package svcnettest runs svcnet's controllers inside another project's
// envtest suite. envtest starts etcd and kube-apiserver but no
// kube-controller-manager, so a suite never sees EndpointSlices; with
// svcnettest it gets them from svcnet's EndpointSlice controller (the
// default), and, where asked, ClusterIPs and nodePorts chosen by svcnet's
// admission webhook and the IPAddress and nodePort audits. The controllers
// are exactly those `svcnet manager` runs (controllers.Setup).
//
//	env := &envtest.Environment{}
//	cfg, err := env.Start()
//	...
//	svcnet, err := svcnettest.Start(ctx, cfg, svcnettest.Options{})
//	...
//	defer svcnet.Stop()
package svcnettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	svcnetconfig "github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// startTimeout bounds how long Start waits for the controllers to be ready.
const startTimeout = time.Minute

// Options select and configure the controllers.
type Options struct {
	// Controllers configures the controllers as `svcnet manager` does;
	// fields left at zero get the defaults. An empty Controllers list runs
	// the EndpointSlice controller alone (not every controller, as
	// `svcnet manager` would).
	Controllers controllers.Options
	// Webhook is the envtest Environment's WebhookInstallOptions, after
	// env.Start(), for the controllers that allocate in the admission
	// webhook (clusterip, nodeport): set env.WebhookInstallOptions to
	// WebhookInstallOptions() before starting the Environment, and pass
	// &env.WebhookInstallOptions here.
	Webhook *envtest.WebhookInstallOptions
	// Logger receives the controllers' logs; the zero Logger discards them.
	Logger logr.Logger
}

// Controllers are svcnet's controllers running against a test API server.
type Controllers struct {
	// Manager is the controller-runtime manager they run in; its client
	// reads through the same cache.
	Manager ctrl.Manager

	cancel context.CancelFunc
	done   chan error
}

// CRDs returns svcnet's CustomResourceDefinitions (ServiceCIDRBinding,
// LoadBalancerIPPool), for envtest.Environment.CRDs. Start installs them
// too when they are missing.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return svcnetconfig.CRDs()
}

// WebhookInstallOptions returns envtest options that install svcnet's
// webhook configurations (Services, and LoadBalancerIPPools); envtest
// points them at the local webhook server Start runs.
func WebhookInstallOptions() (envtest.WebhookInstallOptions, error) {
	mutating, err := svcnetconfig.MutatingWebhookConfiguration("")
	if err != nil {
		return envtest.WebhookInstallOptions{}, err
	}
	validating, err := svcnetconfig.ValidatingWebhookConfiguration("")
	if err != nil {
		return envtest.WebhookInstallOptions{}, err
	}
	return envtest.WebhookInstallOptions{
		MutatingWebhooks:   []*admissionregistrationv1.MutatingWebhookConfiguration{mutating},
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{validating},
	}, nil
}

// AddToScheme registers every type svcnet's controllers read or write.
func AddToScheme(s *runtime.Scheme) error { return scheme.AddToScheme(s) }

// Start runs the selected controllers against cfg in a manager of their
// own (no leader election, no metrics) and returns once their caches are
// synced and, with the webhook, it answers. Stop ends them.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (*Controllers, error) {
	copts := opts.Controllers
	if len(copts.Controllers) == 0 {
		copts.Controllers = []string{controllers.EndpointSliceName}
	}
	if err := copts.Validate(); err != nil {
		return nil, fmt.Errorf("svcnettest: %w", err)
	}
	withWebhook := controllers.NeedsWebhook(copts.Controllers)
	if withWebhook && opts.Webhook == nil {
		return nil, errors.New("svcnettest: the clusterip and nodeport controllers allocate in the admission webhook: " +
			"set env.WebhookInstallOptions from WebhookInstallOptions() and pass Options.Webhook")
	}
	mgr, healthURL, err := newManager(cfg, opts, withWebhook)
	if err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, mgr); err != nil {
		return nil, err
	}
	if err := controllers.Setup(mgr, copts); err != nil {
		return nil, fmt.Errorf("svcnettest: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Controllers{Manager: mgr, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- mgr.Start(runCtx) }()
	if err := c.waitReady(ctx, healthURL, withWebhook); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// Stop ends the controllers and waits for them.
func (c *Controllers) Stop() error {
	c.cancel()
	return <-c.done
}

func newManager(cfg *rest.Config, o Options, withWebhook bool) (ctrl.Manager, string, error) {
	sch := runtime.NewScheme()
	if err := AddToScheme(sch); err != nil {
		return nil, "", err
	}
	healthPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	opts := ctrl.Options{
		Scheme:                 sch,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(healthPort)),
		// A suite may start svcnet more than once in one process.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		Logger:     o.Logger,
	}
	if withWebhook {
		wh := o.Webhook
		opts.WebhookServer = webhook.NewServer(webhook.Options{Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir})
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, "", fmt.Errorf("svcnettest: creating the manager: %w", err)
	}
	return mgr, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), nil
}

func installCRDs(ctx context.Context, mgr ctrl.Manager) error {
	sch := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(sch); err != nil {
		return err
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: sch})
	if err != nil {
		return err
	}
	if err := svcnetconfig.InstallCRDs(ctx, c); err != nil {
		return fmt.Errorf("svcnettest: installing svcnet's CRDs: %w", err)
	}
	return nil
}

// waitReady waits for the caches and, with the webhook, for the manager's
// readiness checks (the webhook answers only once its allocators are in
// sync).
func (c *Controllers) waitReady(ctx context.Context, healthURL string, withWebhook bool) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if !c.Manager.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("svcnettest: caches not synced after %s", startTimeout)
	}
	if !withWebhook {
		return nil
	}
	var last error
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-c.done:
			c.done <- err
			return false, fmt.Errorf("svcnettest: the manager stopped: %w", err)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		last = fmt.Errorf("readyz: %s", resp.Status)
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil && last != nil && ctx.Err() != nil {
		return fmt.Errorf("svcnettest: not ready after %s: %w", startTimeout, last)
	}
	return err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
