// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Decode reads Kubernetes objects as `kubectl get -o yaml` and Helm or
// kustomize renders write them: YAML or JSON, one document or several,
// lists (kind: List) opened into their items. Empty documents are
// skipped; a document that is not an object with apiVersion and kind is
// an error.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetAPIVersion() == "" || o.GetKind() == "" {
			return nil, fmt.Errorf("document %d is not a Kubernetes object: it has no apiVersion and kind", doc)
		}
		if !o.IsList() {
			out = append(out, o)
			continue
		}
		list, err := o.ToList()
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", doc, o.GetKind(), err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
	}
}

// WriteYAML writes the result as YAML that `kubectl apply -f` takes: the
// warnings as comments first, then the pools and the announcements, by
// name, without status.
func WriteYAML(w io.Writer, res Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Converted from MetalLB by `svcnet migrate metallb`: %d LoadBalancerIPPool(s), %d LoadBalancerAnnouncement(s).\n",
		len(res.Pools), len(res.Announcements))
	if len(res.Warnings) == 0 {
		b.WriteString("# Every MetalLB field was converted.\n")
	} else {
		fmt.Fprintf(&b, "# Not converted, or not exactly (%d):\n", len(res.Warnings))
		for _, warning := range res.Warnings {
			fmt.Fprintf(&b, "# - %s\n", strings.ReplaceAll(warning.String(), "\n", " "))
		}
	}
	var objs []runtime.Object
	for i := range res.Pools {
		objs = append(objs, &res.Pools[i])
	}
	for i := range res.Announcements {
		objs = append(objs, &res.Announcements[i])
	}
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		delete(m, "status")
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		doc, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(doc)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
