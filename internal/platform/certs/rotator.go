// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package certs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Rotator keeps the webhook's certificates current. Every replica runs one:
// the Secret is the shared truth, optimistic concurrency settles races.
type Rotator struct {
	// Client must read through to the API server (no cache): the rotator
	// runs before the manager's caches start.
	Client     client.Client
	Namespace  string
	SecretName string
	// ConfigName is the MutatingWebhookConfiguration whose caBundle is kept
	// in step; empty: none.
	ConfigName string
	// ValidatingConfigName is the ValidatingWebhookConfiguration whose
	// caBundle is kept in step; empty: none.
	ValidatingConfigName string
	// Hosts are the DNS names and IPs the serving certificate is valid for.
	Hosts    []string
	CertDir  string
	Validity Validity
	Clock    clock.PassiveClock
	// Interval between checks once everything is in place (default 1h);
	// until the caBundle could be patched, checks come every 5 s.
	Interval time.Duration
}

// +kubebuilder:rbac:groups="",namespace=svcnet-system,resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;list;watch;patch

// Ensure makes the Secret, the files and the caBundle current. It returns
// whether the caBundle is in place.
func (r *Rotator) Ensure(ctx context.Context) (bool, error) {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Validity == (Validity{}) {
		r.Validity = DefaultValidity
	}
	bundle, err := r.ensureSecret(ctx)
	if err != nil {
		return false, err
	}
	if err := r.writeFiles(bundle); err != nil {
		return false, err
	}
	return r.patchCABundle(ctx, bundle.CACert)
}

func (r *Rotator) ensureSecret(ctx context.Context) (Bundle, error) {
	for range 5 {
		secret := &corev1.Secret{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}, secret)
		switch {
		case apierrors.IsNotFound(err):
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.SecretName,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "svcnet"}},
				Type: corev1.SecretTypeTLS,
			}
		case err != nil:
			return Bundle{}, fmt.Errorf("reading Secret %s/%s: %w", r.Namespace, r.SecretName, err)
		}
		current := FromData(secret.Data)
		next, changed, err := Ensure(current, r.Hosts, r.Clock.Now(), r.Validity)
		if err != nil {
			return Bundle{}, err
		}
		if !changed {
			return current, nil
		}
		secret.Data = next.Data()
		if secret.ResourceVersion == "" {
			err = r.Client.Create(ctx, secret)
		} else {
			err = r.Client.Update(ctx, secret)
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue // another replica renewed it first: use theirs
		}
		if err != nil {
			return Bundle{}, fmt.Errorf("writing Secret %s/%s: %w", r.Namespace, r.SecretName, err)
		}
		ctrl.LoggerFrom(ctx).Info("Renewed webhook certificates", "secret", klog.KRef(r.Namespace, r.SecretName))
		return next, nil
	}
	return Bundle{}, fmt.Errorf("the Secret %s/%s keeps changing under us", r.Namespace, r.SecretName)
}

// writeFiles updates tls.crt and tls.key only when they changed, each with
// an atomic rename, so the webhook server's watcher reloads once.
func (r *Rotator) writeFiles(b Bundle) error {
	if err := os.MkdirAll(r.CertDir, 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{KeyTLSKey: b.TLSKey, KeyTLSCert: b.TLSCert, KeyCACert: b.CACert} {
		path := filepath.Join(r.CertDir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return nil
}

func (r *Rotator) patchCABundle(ctx context.Context, ca []byte) (bool, error) {
	mutating, err := r.patchConfig(ctx, "MutatingWebhookConfiguration", r.ConfigName, &admissionregistrationv1.MutatingWebhookConfiguration{}, ca)
	if err != nil {
		return false, err
	}
	validating, err := r.patchConfig(ctx, "ValidatingWebhookConfiguration", r.ValidatingConfigName, &admissionregistrationv1.ValidatingWebhookConfiguration{}, ca)
	return mutating && validating, err
}

// patchConfig puts ca into every webhook of the named configuration (a
// Mutating- or ValidatingWebhookConfiguration, into cfg). It reports
// whether the caBundle is in place; an empty name needs none.
func (r *Rotator) patchConfig(ctx context.Context, kind, name string, cfg client.Object, ca []byte) (bool, error) {
	if name == "" {
		return true, nil
	}
	inPlace := false
	// Every replica patches the same object at start: a conflict means
	// another got there first, so read again and check.
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		inPlace = false
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, cfg); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("reading %s %s: %w", kind, name, err)
		}
		base := cfg.DeepCopyObject().(client.Object)
		changed := false
		for _, cc := range clientConfigs(cfg) {
			if !bytes.Equal(cc.CABundle, ca) {
				cc.CABundle = ca
				changed = true
			}
		}
		if changed {
			if err := r.Client.Patch(ctx, cfg, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				if apierrors.IsConflict(err) {
					return err
				}
				return fmt.Errorf("patching caBundle of %s %s: %w", kind, name, err)
			}
			ctrl.LoggerFrom(ctx).Info("Patched webhook caBundle", "kind", kind, "name", name)
		}
		inPlace = true
		return nil
	})
	return inPlace, err
}

// clientConfigs are the client configurations of a webhook configuration's
// webhooks, to change in place.
func clientConfigs(cfg client.Object) []*admissionregistrationv1.WebhookClientConfig {
	var out []*admissionregistrationv1.WebhookClientConfig
	switch c := cfg.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range c.Webhooks {
			out = append(out, &c.Webhooks[i].ClientConfig)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range c.Webhooks {
			out = append(out, &c.Webhooks[i].ClientConfig)
		}
	}
	return out
}

// Start checks periodically until ctx ends; it is a manager Runnable.
func (r *Rotator) Start(ctx context.Context) error {
	interval := r.Interval
	if interval <= 0 {
		interval = time.Hour
	}
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certs")
	for {
		wait := interval
		ok, err := r.Ensure(ctx)
		if err != nil {
			log.Error(err, "Keeping webhook certificates current")
		}
		if err != nil || !ok {
			wait = 5 * time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// NeedLeaderElection is false: every replica serves with the files.
func (r *Rotator) NeedLeaderElection() bool { return false }
