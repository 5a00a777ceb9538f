// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package addons

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

func TestKubeDNSIP(t *testing.T) {
	for cidrs, want := range map[string]string{
		"10.96.0.0/16":                 "10.96.0.10",
		"10.0.0.0/24,fd00:10:96::/112": "10.0.0.10",
		"fd00:10:96::/112":             "fd00:10:96::a",
	} {
		var parsed []netip.Prefix
		for _, p := range strings.Split(cidrs, ",") {
			parsed = append(parsed, netip.MustParsePrefix(p))
		}
		got, err := KubeDNSIP(parsed)
		if err != nil || got.String() != want {
			t.Errorf("KubeDNSIP(%s) = %s, %v; want %s", cidrs, got, err, want)
		}
	}
	if got, err := KubeDNSIP([]netip.Prefix{netip.MustParsePrefix("10.96.0.0/29")}); err == nil || !strings.Contains(err.Error(), "--dns=false") {
		t.Errorf("KubeDNSIP(/29) = %s, %v; want an error pointing at --dns=false", got, err)
	}
}

func TestCoreDNSAddon(t *testing.T) {
	objs, err := coreDNSObjects(netip.MustParseAddr("10.96.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = o
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if byKind[k] == nil {
			t.Errorf("the add-on has no %s", k)
		}
	}
	if ip, _, _ := unstructured.NestedString(byKind["Service"].Object, "spec", "clusterIP"); ip != "10.96.0.10" {
		t.Errorf("kube-dns clusterIP = %q, want 10.96.0.10", ip)
	}
	containers, _, _ := unstructured.NestedSlice(byKind["Deployment"].Object, "spec", "template", "spec", "containers")
	image := containers[0].(map[string]any)["image"].(string)
	if _, ok := (&images.Store{}).Lookup(image); ok {
		t.Fatal("an empty store knows an image")
	}
	store := &images.Store{}
	store.Add(CoreDNSImage("/bin/coredns"))
	if _, ok := store.Lookup(image); !ok || !strings.HasSuffix(image, ":"+coreDNSVersion) {
		t.Errorf("CoreDNS image = %q, want the one the simulator runs", image)
	}
	corefile, _, _ := unstructured.NestedString(byKind["ConfigMap"].Object, "data", "Corefile")
	if !strings.Contains(corefile, "kubernetes cluster.local in-addr.arpa ip6.arpa") {
		t.Errorf("the Corefile does not serve cluster.local:\n%s", corefile)
	}
}

// TestCoreDNSVersion keeps the add-on's image tag in step with the CoreDNS
// that make k8s-bins builds.
func TestCoreDNSVersion(t *testing.T) {
	mod, err := os.ReadFile("../../hack/coredns/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/coredns/coredns " + coreDNSVersion + "\n"; !strings.Contains(string(mod), want) {
		t.Errorf("hack/coredns/go.mod does not require %q: coreDNSVersion and the build disagree", strings.TrimSpace(want))
	}
}
