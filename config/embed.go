// Package config embeds the manifests `make manifests` generates, so that
// `svcnet up` and the envtest suites install exactly what a cluster gets.
package config

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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
