// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package testenv_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestToolchain proves the binaries from `make k8s-bins` run a real API
// server that allocates a ClusterIP and records it as an IPAddress object
// whose parentRef names the Service.
func TestToolchain(t *testing.T) {
	env, err := testenv.Start(testenv.Options{ServiceCIDRs: "10.97.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := env.Namespace(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	svc := builder.Service("web", ns).Port("http", 80, intstr.FromInt32(8080)).Selector("app", "web").Obj()
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		t.Fatalf("Service got no ClusterIP: %q", svc.Spec.ClusterIP)
	}
	var cidr networkingv1.ServiceCIDR
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "kubernetes"}, &cidr); err != nil {
		t.Fatalf("default ServiceCIDR: %v", err)
	}
	if got := cidr.Spec.CIDRs; len(got) != 1 || got[0] != "10.97.0.0/16" {
		t.Errorf("default ServiceCIDR has CIDRs %v, want [10.97.0.0/16]", got)
	}
	var ip networkingv1.IPAddress
	if err := env.Client.Get(ctx, client.ObjectKey{Name: svc.Spec.ClusterIP}, &ip); err != nil {
		t.Fatalf("IPAddress %s: %v", svc.Spec.ClusterIP, err)
	}
	want := networkingv1.ParentReference{Group: "", Resource: "services", Namespace: ns, Name: "web"}
	if ip.Spec.ParentRef == nil || *ip.Spec.ParentRef != want {
		t.Errorf("IPAddress %s parentRef = %+v, want %+v", ip.Name, ip.Spec.ParentRef, want)
	}
}
