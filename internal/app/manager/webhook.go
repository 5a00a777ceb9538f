// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/config"
	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/internal/platform/enumflag"
)

// CertManagement is --webhook-cert-management: how the webhook gets its
// serving certificate.
type CertManagement string

// How the webhook gets its serving certificate.
const (
	// CertManagementSelf: svcnet keeps a CA and certificate in a Secret,
	// writes them to --webhook-cert-dir and patches the caBundle.
	CertManagementSelf CertManagement = "self"
	// CertManagementExternal: something else (cert-manager and its CA
	// injector) provides tls.crt/tls.key in --webhook-cert-dir and the
	// caBundle.
	CertManagementExternal CertManagement = "external"
)

// CertManagements are the values of --webhook-cert-management.
var CertManagements = []CertManagement{CertManagementSelf, CertManagementExternal}

// WebhookOptions configure the admission webhook server and its
// certificates.
type WebhookOptions struct {
	Host            string
	Port            int
	CertDir         string
	CertManagement  CertManagement
	SecretNamespace string
	SecretName      string
	ServiceName     string
	ConfigName      string
	// ValidatingConfigName is the ValidatingWebhookConfiguration (pools)
	// whose caBundle svcnet keeps current.
	ValidatingConfigName string
	ExtraHosts           []string
	// CertValidity is the serving certificate's lifetime; it is renewed
	// once a third is left, and checked every tenth of it (at most hourly).
	CertValidity time.Duration
}

// DefaultWebhookOptions match config/ (kustomize namePrefix svcnet-).
func DefaultWebhookOptions() WebhookOptions {
	return WebhookOptions{
		Port:                 9443,
		CertDir:              filepath.Join("/tmp", "k8s-webhook-server", "serving-certs"),
		CertManagement:       CertManagementSelf,
		SecretName:           "svcnet-webhook-server-cert",
		ServiceName:          "svcnet-webhook-service",
		ConfigName:           config.WebhookConfigurationName,
		ValidatingConfigName: config.ValidatingWebhookConfigurationName,
		CertValidity:         certs.DefaultValidity.Serving,
	}
}

// AddFlags binds the options.
func (o *WebhookOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Host, "webhook-host", o.Host, "Address the admission webhook server listens on; empty: all.")
	fs.IntVar(&o.Port, "webhook-port", o.Port, "Port of the admission webhook server (it listens when clusterip or nodeport is enabled).")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", o.CertDir, "Folder of the webhook's tls.crt and tls.key.")
	fs.Var(enumflag.Var(&o.CertManagement, "management"), "webhook-cert-management", "self: svcnet creates and renews its CA and serving certificate (Secret --webhook-secret-name) and patches the caBundle; external: cert-manager or another tool provides them.")
	fs.StringVar(&o.SecretNamespace, "webhook-secret-namespace", o.SecretNamespace, "Namespace of the certificate Secret; empty: the manager's own namespace.")
	fs.StringVar(&o.SecretName, "webhook-secret-name", o.SecretName, "Name of the Secret that holds the webhook's CA and serving certificate.")
	fs.StringVar(&o.ServiceName, "webhook-service-name", o.ServiceName, "Service in front of the webhook; its DNS names go into the serving certificate.")
	fs.StringVar(&o.ConfigName, "webhook-configuration-name", o.ConfigName, "MutatingWebhookConfiguration whose caBundle svcnet keeps current.")
	fs.StringVar(&o.ValidatingConfigName, "webhook-validating-configuration-name", o.ValidatingConfigName, "ValidatingWebhookConfiguration (LoadBalancerIPPools) whose caBundle svcnet keeps current; empty: none.")
	fs.DurationVar(&o.CertValidity, "webhook-cert-validity", o.CertValidity, "Lifetime of the serving certificate svcnet makes (--webhook-cert-management=self); renewed once a third of it is left. Its CA lives 10 years.")
	fs.StringSliceVar(&o.ExtraHosts, "webhook-cert-extra-hosts", o.ExtraHosts, "More DNS names or IPs for the serving certificate, e.g. 127.0.0.1 when the API server calls the webhook by URL.")
}

// Validate names the bad flag.
func (o *WebhookOptions) Validate() error {
	var errs []error
	if o.Port < 1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-port must be between 1 and 65535, got %d", o.Port))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("--webhook-cert-dir must not be empty"))
	}
	if err := enumflag.Check("webhook-cert-management", o.CertManagement, CertManagements); err != nil {
		errs = append(errs, err)
	}
	if o.CertManagement == CertManagementSelf && (o.SecretName == "" || o.ServiceName == "") {
		errs = append(errs, errors.New("--webhook-secret-name and --webhook-service-name must not be empty with --webhook-cert-management=self"))
	}
	if o.CertValidity < time.Second || o.CertValidity > certs.DefaultValidity.CA/3 {
		errs = append(errs, fmt.Errorf("--webhook-cert-validity must be between 1s and %s, got %s", certs.DefaultValidity.CA/3, o.CertValidity))
	}
	if o.Host != "" && net.ParseIP(o.Host) == nil && o.Host != "localhost" {
		errs = append(errs, fmt.Errorf("--webhook-host must be an IP address, got %q", o.Host))
	}
	return errors.Join(errs...)
}

// hosts are the serving certificate's names: the Service's DNS names, and
// the extra hosts.
func (o *WebhookOptions) hosts() []string {
	ns, svc := o.SecretNamespace, o.ServiceName
	h := []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local", svc, svc + "." + ns}
	for _, e := range o.ExtraHosts {
		if !slices.Contains(h, e) {
			h = append(h, e)
		}
	}
	return h
}

func (o *WebhookOptions) rotator(c client.Client) *certs.Rotator {
	return &certs.Rotator{
		Client: c, Namespace: o.SecretNamespace, SecretName: o.SecretName, ConfigName: o.ConfigName,
		ValidatingConfigName: o.ValidatingConfigName,
		Hosts:                o.hosts(), CertDir: o.CertDir,
		Validity: certs.Validity{CA: certs.DefaultValidity.CA, Serving: o.CertValidity},
		Interval: min(time.Hour, o.CertValidity/10),
	}
}
