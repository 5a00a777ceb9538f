// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package addons holds the cluster add-ons `svcnet up` installs as a
// cluster installer would. Cluster DNS: CoreDNS behind kube-dns at the
// tenth address of the first Service range (coredns.yaml), served by the
// node simulator running bin/k8s/coredns, reached through the nodes' rules
// like any Service.
package addons

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

	"github.com/svcnet-io/svcnet/localcluster/controlplane"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// ClusterDomain is the kubelets' --cluster-domain.
const ClusterDomain = "cluster.local"

const (
	// coreDNSVersion is the CoreDNS release hack/coredns builds; the
	// add-on's image carries it (a test keeps the two in step).
	coreDNSVersion = "v1.15.0"
	// coreDNSImage is the repository of the CoreDNS image that cluster
	// installers deploy, whose entrypoint is /coredns.
	coreDNSImage = "registry.k8s.io/coredns/coredns"
)

// CoreDNSImage runs the CoreDNS image as binary (bin/k8s/coredns).
func CoreDNSImage(binary string) images.Image {
	return images.Image{
		Name: "coredns", Repositories: []string{coreDNSImage},
		Config: images.Config{Entrypoint: []string{"/coredns"}}, Files: map[string]string{"/coredns": binary},
	}
}

//go:embed coredns.yaml
var coreDNSManifest string

// KubeDNSIP is the tenth address of the first Service range, where
// installers put kube-dns (10.96.0.10 for 10.96.0.0/16).
func KubeDNSIP(serviceCIDRs []netip.Prefix) (netip.Addr, error) {
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
		"ClusterIP": ip.String(), "Domain": ClusterDomain, "Image": coreDNSImage + ":" + coreDNSVersion,
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

// InstallCoreDNS applies the add-on with kube-dns at ip.
func InstallCoreDNS(ctx context.Context, c client.Client, ip netip.Addr) error {
	objs, err := coreDNSObjects(ip)
	if err != nil {
		return err
	}
	if err := Apply(ctx, c, objs); err != nil {
		return fmt.Errorf("installing the cluster DNS add-on: %w", err)
	}
	return nil
}

// ResolvConf is the resolver file of the namespaces outside the Pods
// (`ip netns exec`'s /etc/resolv.conf): names resolve through kube-dns at
// ip as from a Pod of the default namespace.
func ResolvConf(ip netip.Addr) []byte {
	return fmt.Appendf(nil, "nameserver %s\nsearch default.svc.%[2]s svc.%[2]s %[2]s\noptions ndots:5\n", ip, ClusterDomain)
}

// DNSReadyTimeout bounds the wait for a ready CoreDNS replica.
const DNSReadyTimeout = 2 * time.Minute

// WaitDNS waits until CoreDNS has a ready replica behind kube-dns.
func WaitDNS(ctx context.Context, c client.Client, timeout time.Duration) error {
	return controlplane.WaitFor(ctx, timeout, "a ready CoreDNS replica", func() (bool, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "coredns"}, &d); err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas > 0, nil
	})
}

// DNSLine is the tour's line about cluster DNS.
func DNSLine(ip netip.Addr) string {
	return fmt.Sprintf("cluster DNS: CoreDNS %s behind kube-dns %s (kube-system)", coreDNSVersion, ip)
}
