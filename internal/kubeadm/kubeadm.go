// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package kubeadm holds what kubeadm v1.37 writes for kube-proxy, for
// `svcnet up --kube-proxy` and for the tests that run kube-proxy, or
// svcnet's agent in its place, as a kubeadm cluster does.
package kubeadm

import (
	_ "embed"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// kubeProxyConfig is kube-proxy's config.conf as kubeadm v1.37 writes
// it: the one copy `svcnet up --kube-proxy` and every test that runs
// kube-proxy, or svcnet as its stand-in, start from.
//
//go:embed kube-proxy.conf
var kubeProxyConfig []byte

// KubeProxyConfig is kubeadm's config.conf with the fields changes
// names (dotted paths, e.g. "conntrack.maxPerCore") set to their values;
// a nil value writes null. A path that is not in kubeadm's file is an
// error, so that a misspelt field is never silently added.
func KubeProxyConfig(changes map[string]any) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(kubeProxyConfig, &doc); err != nil {
		return nil, err
	}
	for path, v := range changes {
		keys := strings.Split(path, ".")
		m := doc
		for _, k := range keys[:len(keys)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("kubeadm's config.conf has no section %q (in %q)", k, path)
			}
			m = next
		}
		last := keys[len(keys)-1]
		if _, ok := m[last]; !ok {
			return nil, fmt.Errorf("kubeadm's config.conf has no field %q", path)
		}
		m[last] = v
	}
	return yaml.Marshal(doc)
}
