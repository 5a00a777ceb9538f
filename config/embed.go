// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package config embeds the manifests `make manifests` generates, so that
// `svcnet up` and the envtest suites install exactly what a cluster gets.
package config

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// files is every kustomization config/default is built from: what
// BuildDefault builds, and the generated CRDs and webhook configurations
// the in-process install reads.
//
//go:embed default/*.yaml rbac/*.yaml webhook/*.yaml crd/*.yaml crd/bases/*.yaml
var files embed.FS

// BuildDefault builds config/default, as embedded in this binary, with
// `kubectl kustomize` (kubectl is its path), writing the tree under
// workDir first, and returns the objects in kustomize's order.
func BuildDefault(ctx context.Context, kubectl, workDir string) ([]*unstructured.Unstructured, error) {
	if err := os.RemoveAll(workDir); err != nil {
		return nil, err
	}
	if err := os.CopyFS(workDir, files); err != nil {
		return nil, fmt.Errorf("writing config/ to %s: %w", workDir, err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(workDir, "default"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %w: %s", filepath.Join(workDir, "default"), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading kustomize's output: %w", err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("decoding kustomize's output: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// WebhookConfigurationName is the MutatingWebhookConfiguration's name once
// installed (kustomize's namePrefix svcnet- on the generated name).
const WebhookConfigurationName = "svcnet-mutating-webhook-configuration"

// ValidatingWebhookConfigurationName is the ValidatingWebhookConfiguration's
// (LoadBalancerIPPools) name once installed.
const ValidatingWebhookConfigurationName = "svcnet-validating-webhook-configuration"

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
	if err := decodeDoc("webhook/manifests.yaml", "MutatingWebhookConfiguration", cfg); err != nil {
		return nil, err
	}
	cfg.Name = WebhookConfigurationName
	for i := range cfg.Webhooks {
		useURL(&cfg.Webhooks[i].ClientConfig, url)
	}
	return cfg, nil
}

// ValidatingWebhookConfiguration returns the generated configuration that
// validates LoadBalancerIPPools, named ValidatingWebhookConfigurationName,
// calling url when it is not empty.
func ValidatingWebhookConfiguration(url string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := decodeDoc("webhook/manifests.yaml", "ValidatingWebhookConfiguration", cfg); err != nil {
		return nil, err
	}
	cfg.Name = ValidatingWebhookConfigurationName
	for i := range cfg.Webhooks {
		useURL(&cfg.Webhooks[i].ClientConfig, url)
	}
	return cfg, nil
}

// useURL points a client config at url + its Service path.
func useURL(cc *admissionregistrationv1.WebhookClientConfig, url string) {
	if url == "" || cc.Service == nil {
		return
	}
	path := ""
	if cc.Service.Path != nil {
		path = *cc.Service.Path
	}
	u := url + path
	cc.URL, cc.Service = &u, nil
}

// decodeDoc decodes the document of a multi-document file whose kind is kind.
func decodeDoc(path, kind string, into any) error {
	b, err := files.ReadFile(path)
	if err != nil {
		return err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s has no %s", path, kind)
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if meta.Kind == kind {
			if err := yaml.Unmarshal(doc, into); err != nil {
				return fmt.Errorf("decoding %s in %s: %w", kind, path, err)
			}
			return nil
		}
	}
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

// InstallWebhook creates or updates svcnet's Mutating- and
// ValidatingWebhookConfiguration, calling url (see
// MutatingWebhookConfiguration). svcnet's manager fills in the caBundles,
// which an update keeps.
func InstallWebhook(ctx context.Context, c client.Client, url string) error {
	mutating, err := MutatingWebhookConfiguration(url)
	if err != nil {
		return err
	}
	have := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := install(ctx, c, mutating, have, func() {
		for i := range mutating.Webhooks {
			for _, old := range have.Webhooks {
				if old.Name == mutating.Webhooks[i].Name {
					mutating.Webhooks[i].ClientConfig.CABundle = old.ClientConfig.CABundle
				}
			}
		}
		have.Webhooks = mutating.Webhooks
	}); err != nil {
		return err
	}
	validating, err := ValidatingWebhookConfiguration(url)
	if err != nil {
		return err
	}
	haveV := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	return install(ctx, c, validating, haveV, func() {
		for i := range validating.Webhooks {
			for _, old := range haveV.Webhooks {
				if old.Name == validating.Webhooks[i].Name {
					validating.Webhooks[i].ClientConfig.CABundle = old.ClientConfig.CABundle
				}
			}
		}
		haveV.Webhooks = validating.Webhooks
	})
}

// install creates want, or reads it into have and, after merge made have
// what it should be, updates it.
func install(ctx context.Context, c client.Client, want, have client.Object, merge func()) error {
	err := c.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	merge()
	return c.Update(ctx, have)
}

// RemoveWebhook deletes svcnet's webhook configurations, if any:
// `svcnet up --pipeline=upstream` on a data dir that svcnet's pipeline used
// must not send Services to a webhook nobody serves.
func RemoveWebhook(ctx context.Context, c client.Client) error {
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	mutating.Name = WebhookConfigurationName
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	validating.Name = ValidatingWebhookConfigurationName
	return errors.Join(client.IgnoreNotFound(c.Delete(ctx, mutating)), client.IgnoreNotFound(c.Delete(ctx, validating)))
}
