// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"text/template"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// The cluster DNS add-on: CoreDNS behind kube-dns at the tenth address of
// the first Service range, applied as an installer would, served by the
// node simulator running bin/k8s/coredns, reached through the nodes'
// rules like any Service.

const (
	// clusterDomain is the kubelets' --cluster-domain.
	clusterDomain = "cluster.local"
	// coreDNSVersion is the CoreDNS release hack/coredns builds; the
	// add-on's image carries it (a test keeps the two in step).
	coreDNSVersion = "v1.15.0"
	// coreDNSImage is the repository of the CoreDNS image that cluster
	// installers deploy, whose entrypoint is /coredns.
	coreDNSImage = "registry.k8s.io/coredns/coredns"
	// fieldOwner is the field manager of what `svcnet up` applies.
	fieldOwner = "svcnet-up"
)

// coreDNSImageOf runs the CoreDNS image as bin/k8s/coredns.
func coreDNSImageOf(binary string) images.Image {
	return images.Image{
		Name: "coredns", Repositories: []string{coreDNSImage},
		Config: images.Config{Entrypoint: []string{"/coredns"}}, Files: map[string]string{"/coredns": binary},
	}
}

//go:embed addons/coredns.yaml
var coreDNSManifest string

// kubeDNSIP is the tenth address of the first Service range, where
// installers put kube-dns (10.96.0.10 for 10.96.0.0/16).
func kubeDNSIP(serviceCIDRs []netip.Prefix) (netip.Addr, error) {
	a := serviceCIDRs[0].Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	if !serviceCIDRs[0].Contains(a) {
		return netip.Addr{}, fmt.Errorf("--service-cluster-ip-range %s is too small for kube-dns at its tenth address (use --dns=false)", serviceCIDRs[0])
	}
	return a, nil
}

// coreDNSObjects renders the add-on for a kube-dns address.
func coreDNSObjects(ip netip.Addr) ([]*unstructured.Unstructured, error) {
	t, err := template.New("coredns").Parse(coreDNSManifest)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, map[string]string{
		"ClusterIP": ip.String(), "Domain": clusterDomain, "Image": coreDNSImage + ":" + coreDNSVersion,
	}); err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&b, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("the CoreDNS add-on's manifest: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// applyObjects server-side applies objs, as `kubectl apply
// --server-side` does, taking over fields an earlier run set.
func applyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // Apply with unstructured objects
			return fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}

// installDNS applies the add-on and points the namespaces' `ip netns
// exec` resolver at it.
func (cl *cluster) installDNS(ctx context.Context, c client.Client, ip netip.Addr) error {
	objs, err := coreDNSObjects(ip)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, c, objs); err != nil {
		return fmt.Errorf("installing the cluster DNS add-on: %w", err)
	}
	// Outside the Pods, names resolve as from a Pod of the default
	// namespace.
	resolv := fmt.Appendf(nil, "nameserver %s\nsearch default.svc.%[2]s svc.%[2]s %[2]s\noptions ndots:5\n", ip, clusterDomain)
	for _, ns := range append([]string{cl.client}, cl.nodeNamespaces()...) {
		if err := cl.lab.SetResolvConf(ns, resolv); err != nil {
			return fmt.Errorf("writing the resolver file of %s: %w", ns, err)
		}
	}
	return nil
}

func (cl *cluster) nodeNamespaces() []string {
	var out []string
	for _, n := range cl.nodes {
		out = append(out, n.Net.NetNS)
	}
	return out
}

// dnsReadyTimeout bounds the wait for a ready CoreDNS replica.
const dnsReadyTimeout = 2 * time.Minute

// waitDNS waits until CoreDNS has a ready replica behind kube-dns.
func waitDNS(ctx context.Context, c client.Client, timeout time.Duration) error {
	return waitFor(ctx, timeout, "a ready CoreDNS replica", func() (bool, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "coredns"}, &d); err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas > 0, nil
	})
}

// dnsLine is the tour's line about cluster DNS.
func dnsLine(ip netip.Addr) string {
	return fmt.Sprintf("cluster DNS: CoreDNS %s behind kube-dns %s (kube-system)", coreDNSVersion, ip)
}
