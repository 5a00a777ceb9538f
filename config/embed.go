// Package config embeds the manifests `make manifests` generates, so that
// `svcnet up` and the envtest suites install exactly what a cluster gets.
package config

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed crd/bases/*.yaml webhook/manifests.yaml
var files embed.FS

// WebhookConfigurationName is the MutatingWebhookConfiguration's name once
// installed (kustomize's namePrefix svcnet- on the generated name).
const WebhookConfigurationName = "svcnet-mutating-webhook-configuration"

// CRDs returns svcnet's CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(files, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := decode(p, crd); err != nil {
			return nil, err
		}
		out = append(out, crd)
	}
	return out, nil
}

// MutatingWebhookConfiguration returns the generated configuration, named
// WebhookConfigurationName, calling url (e.g. https://127.0.0.1:9443)
// instead of an in-cluster Service when url is not empty.
func MutatingWebhookConfiguration(url string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := decode("webhook/manifests.yaml", cfg); err != nil {
		return nil, err
	}
	cfg.Name = WebhookConfigurationName
	for i := range cfg.Webhooks {
		cc := &cfg.Webhooks[i].ClientConfig
		if url != "" && cc.Service != nil {
			path := ""
			if cc.Service.Path != nil {
				path = *cc.Service.Path
			}
			u := url + path
			cc.URL, cc.Service = &u, nil
		}
	}
	return cfg, nil
}

func decode(path string, into any) error {
	b, err := files.ReadFile(path)
	if err != nil {
		return err
	}
	b = bytes.TrimPrefix(bytes.TrimSpace(b), []byte("---\n"))
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(into); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// InstallCRDs creates or updates svcnet's CRDs and waits until the API
// server serves them.
func InstallCRDs(ctx context.Context, c client.Client) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	for _, want := range crds {
		have := &apiextensionsv1.CustomResourceDefinition{}
		err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, want)
		case err == nil:
			have.Spec = want.Spec
			err = c.Update(ctx, have)
		}
		if err != nil {
			return fmt.Errorf("installing CRD %s: %w", want.Name, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, want := range crds {
			have := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), have); err != nil {
				return false, nil
			}
			established := false
			for _, cond := range have.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

// InstallWebhook creates or updates svcnet's MutatingWebhookConfiguration,
// calling url (see MutatingWebhookConfiguration). svcnet's manager fills
// in the caBundle.
func InstallWebhook(ctx context.Context, c client.Client, url string) error {
	want, err := MutatingWebhookConfiguration(url)
	if err != nil {
		return err
	}
	have := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err = c.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	for i := range want.Webhooks {
		for _, old := range have.Webhooks {
			if old.Name == want.Webhooks[i].Name {
				want.Webhooks[i].ClientConfig.CABundle = old.ClientConfig.CABundle
			}
		}
	}
	have.Webhooks = want.Webhooks
	return c.Update(ctx, have)
}

// RemoveWebhook deletes svcnet's MutatingWebhookConfiguration, if any:
// `svcnet up --pipeline=upstream` on a data dir that svcnet's pipeline used
// must not send Services to a webhook nobody serves.
func RemoveWebhook(ctx context.Context, c client.Client) error {
	want, err := MutatingWebhookConfiguration("https://127.0.0.1")
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(c.Delete(ctx, want))
}
