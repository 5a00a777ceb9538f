// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package manager builds and runs svcnet's controller-runtime manager from
// its options. `svcnet manager` and `svcnet up` both go through Run; the
// envtest suites call controllers.Setup on a manager of their own.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/internal/platform/informersync"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/internal/platform/version"
)

// Options are the manager's settings; AddFlags binds them to flags.
type Options struct {
	Kubeconfig           string
	LeaderElect          bool
	LeaderElectNamespace string
	LeaderElectID        string
	MetricsBindAddress   string
	// MetricsSecure serves /metrics over HTTPS, to clients the API server
	// authenticates and authorizes (get on the /metrics non-resource URL,
	// the metrics-reader ClusterRole), as kubebuilder v4 scaffolds.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for /metrics; empty: a
	// self-signed certificate made at start.
	MetricsCertDir string
	// EnableHTTP2 lets the webhook and metrics servers speak HTTP/2. Off
	// by default: HTTP/2's stream handling was the way in for the rapid
	// reset and CONTINUATION flood attacks (CVE-2023-44487,
	// CVE-2023-39325), and HTTP/1.1 is all the API server and Prometheus
	// need.
	EnableHTTP2            bool
	HealthProbeBindAddress string
	PprofBindAddress       string
	KubeAPIQPS             float32
	KubeAPIBurst           int
	// APIServerWaitTimeout is how long Run waits for the API server to
	// answer before it gives up.
	APIServerWaitTimeout time.Duration

	Controllers controllers.Options
	Webhook     WebhookOptions

	// SkipNameValidation lets one process start managers more than once
	// (restart tests).
	SkipNameValidation bool

	// Logger, when set, replaces the global logger for this manager.
	Logger logr.Logger
}

// DefaultOptions are the defaults of `svcnet manager`.
func DefaultOptions() Options {
	return Options{
		LeaderElectID:          "svcnet-manager",
		MetricsBindAddress:     ":8443",
		MetricsSecure:          true,
		HealthProbeBindAddress: ":8081",
		Webhook:                DefaultWebhookOptions(),
		KubeAPIQPS:             20,
		KubeAPIBurst:           30,
		APIServerWaitTimeout:   2 * time.Minute,
		Controllers:            controllers.DefaultOptions(),
	}
}

// AddFlags binds the options to fs. The names follow
// kube-controller-manager's where the meaning is the same.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: in-cluster configuration, then $KUBECONFIG.")
	fs.StringSliceVar(&o.Controllers.Controllers, "controllers", o.Controllers.Controllers,
		fmt.Sprintf("Controllers to run: '*' enables all on by default, 'foo' enables foo, '-foo' disables foo. All: %s.", strings.Join(controllers.Names(), ", ")))
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader (Lease in --leader-elect-namespace) so that only one replica acts.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, "Namespace of the leader election Lease. Empty: the manager's own namespace (POD_NAMESPACE or the service account's), else kube-system.")
	fs.StringVar(&o.LeaderElectID, "leader-elect-id", o.LeaderElectID, "Name of the leader election Lease.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the Prometheus /metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve /metrics over HTTPS to authenticated clients allowed to get /metrics (ClusterRole svcnet-metrics-reader); false: plain HTTP to anyone.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "Directory with tls.crt and tls.key for /metrics (reloaded on change); empty: a self-signed certificate.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", o.EnableHTTP2, "Let the webhook and metrics servers speak HTTP/2; off: HTTP/1.1 only (HTTP/2 stream attacks such as rapid reset cannot reach them).")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of /healthz and /readyz; 0 disables them.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, "Address of Go's /debug/pprof endpoints for profiling; empty or 0 disables them.")
	o.Webhook.AddFlags(fs)
	fs.DurationVar(&o.Controllers.ClusterIP.ReuseDelay, "clusterip-reuse-delay", o.Controllers.ClusterIP.ReuseDelay, "clusterip: how long a released ClusterIP stays out of use (a re-created Service still gets it back); 0 reuses at once.")
	fs.StringVar(&o.Controllers.NodePort.Range, "service-node-port-range", o.Controllers.NodePort.Range, "nodeport: the node port range; must match kube-apiserver's flag of the same name.")
	fs.StringSliceVar(&o.Controllers.NodePort.Exclude, "nodeport-exclude", o.Controllers.NodePort.Exclude, "nodeport: port ranges never handed out dynamically, e.g. 32000-32767 or the nodes' ephemeral range; users may still ask for them explicitly (the audit reports it).")
	fs.DurationVar(&o.Controllers.NodePort.ReuseDelay, "nodeport-reuse-delay", o.Controllers.NodePort.ReuseDelay, "nodeport: how long a released nodePort stays out of use (a re-created Service still gets it back); 0 reuses at once.")
	fs.DurationVar(&o.Controllers.Audit.LeakGracePeriod, "ipaddress-leak-grace-period", o.Controllers.Audit.LeakGracePeriod, "ipaddress, loadbalancer: an IPAddress whose Service does not hold it is deleted once it is this old (kube-apiserver: 60s); 0 means the default.")
	o.Controllers.LoadBalancer.AddFlags(fs, "loadbalancer")
	fs.DurationVar(&o.Controllers.Audit.EventQuietPeriod, "audit-event-quiet-period", o.Controllers.Audit.EventQuietPeriod, "ipaddress, nodeport, loadbalancer: a Warning Event repeats for the same object and reason at most this often; 0 means the default.")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Client QPS towards the API server (as kube-controller-manager's flag).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Client burst towards the API server (as kube-controller-manager's flag).")
	fs.DurationVar(&o.APIServerWaitTimeout, "apiserver-wait-timeout", o.APIServerWaitTimeout, "How long to wait at start for the API server to answer its /healthz before giving up (a Pod may start before its node can reach the kubernetes Service).")
	o.addControllerFlags(fs)
}

// addControllerFlags binds the flags kube-controller-manager has for the
// controllers svcnet replaces, under kube-controller-manager's names, and
// svcnet's earlier spellings as deprecated aliases.
func (o *Options) addControllerFlags(fs *pflag.FlagSet) {
	mirror := &o.Controllers.EndpointSliceMirroring
	fs.IntVar(&mirror.MaxEndpointsPerSubset, "mirroring-max-endpoints-per-subset", mirror.MaxEndpointsPerSubset, "endpointslicemirroring: most addresses mirrored from one Endpoints subset (1..1000); the rest are skipped with a Warning Event.")
	fs.IntVar(&mirror.Workers, "mirroring-concurrent-service-endpoint-syncs", mirror.Workers, "endpointslicemirroring: Endpoints synced in parallel.")
	fs.DurationVar(&mirror.BatchPeriod, "mirroring-endpointslice-updates-batch-period", mirror.BatchPeriod, "endpointslicemirroring: wait this long after a change to a mirrored EndpointSlice so that changes arriving together are handled together.")
	es := &o.Controllers.EndpointSlice
	fs.IntVar(&es.MaxEndpointsPerSlice, "max-endpoints-per-slice", es.MaxEndpointsPerSlice, "endpointslice: most endpoints in one EndpointSlice (1..1000).")
	fs.DurationVar(&es.BatchPeriod, "endpointslice-updates-batch-period", es.BatchPeriod, "endpointslice: wait this long after a Pod change so that changes arriving together are written together.")
	fs.IntVar(&es.Workers, "concurrent-service-endpoint-syncs", es.Workers, "endpointslice: Services synced in parallel.")
	for _, a := range deprecatedAliases {
		fs.AddFlag(&pflag.Flag{Name: a.old, Value: fs.Lookup(a.current).Value, DefValue: fs.Lookup(a.current).DefValue,
			Usage: "Deprecated: use --" + a.current + "."})
		if err := fs.MarkDeprecated(a.old, "use --"+a.current+" (kube-controller-manager's name) instead"); err != nil {
			panic(err) // only if the alias was not just added
		}
	}
}

// deprecatedAliases are svcnet's earlier flag names that differ from
// kube-controller-manager's. They still work, with a warning.
// (kube-controller-manager's own --endpoint-updates-batch-period belongs to
// its Endpoints controller, which svcnet does not replace.)
var deprecatedAliases = []struct{ old, current string }{
	{old: "endpoint-updates-batch-period", current: "endpointslice-updates-batch-period"},
}

// Config is Options completed: checked once, and with what the manager
// would otherwise work out while starting settled (the namespaces of the
// leader election Lease and of the webhook's certificate Secret, whether
// the webhook serves).
type Config struct {
	Options
	// NeedsWebhook tells whether an enabled controller allocates at
	// admission.
	NeedsWebhook bool
}

// Complete checks the options, naming each bad flag, and settles what
// depends on the environment.
func (o *Options) Complete() (Config, error) {
	var errs []error
	if err := o.Controllers.Validate(); err != nil {
		errs = append(errs, err)
	}
	for flag, addr := range map[string]string{"--metrics-bind-address": o.MetricsBindAddress, "--health-probe-bind-address": o.HealthProbeBindAddress} {
		if addr == "0" || addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", flag, addr, err))
		}
	}
	c := Config{Options: *o, NeedsWebhook: controllers.NeedsWebhook(o.Controllers.Controllers)}
	if c.NeedsWebhook {
		if err := o.Webhook.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.KubeAPIQPS, o.KubeAPIBurst))
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if c.LeaderElectNamespace == "" {
		c.LeaderElectNamespace = ownNamespace()
	}
	if c.NeedsWebhook && c.Webhook.CertManagement == CertManagementSelf && c.Webhook.SecretNamespace == "" {
		c.Webhook.SecretNamespace = ownNamespace()
	}
	return c, nil
}

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// New builds a manager with every enabled controller registered, from
// options completed once (Options.Complete).
func New(cfg *rest.Config, o Config) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = o.KubeAPIQPS
	cfg.Burst = o.KubeAPIBurst
	cfg.UserAgent = repairs.Self + "/" + version.Version
	var rotator *certs.Rotator
	if o.NeedsWebhook && o.Webhook.CertManagement == CertManagementSelf {
		direct, err := client.New(cfg, client.Options{})
		if err != nil {
			return nil, err
		}
		rotator = o.Webhook.rotator(direct)
		// The webhook server needs its files before it starts.
		if _, err := rotator.Ensure(context.Background()); err != nil {
			return nil, fmt.Errorf("webhook certificates: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                o.metricsServer(),
		HealthProbeBindAddress: o.HealthProbeBindAddress,
		PprofBindAddress:       o.PprofBindAddress,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: o.Webhook.Host, Port: o.Webhook.Port, CertDir: o.Webhook.CertDir, TLSOpts: o.tlsOptions(),
		}),
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectID,
		LeaderElectionNamespace:       o.LeaderElectNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		NewCache:                      informersync.NewCache,
		GracefulShutdownTimeout:       ptr.To(10 * time.Second),
		Logger:                        o.Logger,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.SkipNameValidation)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := controllers.Setup(mgr, o.Controllers); err != nil {
		return nil, err
	}
	if rotator != nil {
		if err := mgr.Add(rotator); err != nil {
			return nil, err
		}
	}
	if o.LeaderElect && o.NeedsWebhook {
		label, err := newLeaderLabel(context.Background(), cfg)
		if err != nil {
			return nil, err
		}
		if label != nil {
			if err := mgr.Add(label); err != nil {
				return nil, err
			}
		}
	}
	return mgr, nil
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsServer serves /metrics, behind the API server's authentication and
// authorization when MetricsSecure.
func (o *Options) metricsServer() metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsBindAddress, TLSOpts: o.tlsOptions()}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		m.CertDir = o.MetricsCertDir
	}
	return m
}

// tlsOptions are the TLS settings of the webhook and metrics servers:
// HTTP/1.1 only unless EnableHTTP2.
func (o *Options) tlsOptions() []func(*tls.Config) {
	if o.EnableHTTP2 {
		return nil
	}
	return []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
}

// Run waits for the API server, builds the manager and runs it until ctx
// ends.
func Run(ctx context.Context, cfg *rest.Config, o Config) error {
	if err := WaitForAPIServer(ctx, cfg, o.APIServerWaitTimeout); err != nil {
		return err
	}
	mgr, err := New(cfg, o)
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Starting svcnet manager", "version", version.String())
	return mgr.Start(ctx)
}

func ownNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return "kube-system"
}
