// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/ipam"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
	"github.com/svcnet-io/svcnet/test/builder"
)

// A PreferDualStack Service made while the cluster was single-stack keeps
// its one family through later updates once the cluster is dual-stack, as
// kube-apiserver keeps it; a new one gets both.
func TestUpdateKeepsPreferDualStackFamilies(t *testing.T) {
	ctx := context.Background()
	alloc := ipam.New(ipam.Options{})
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceCIDR},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16", "fd00:10:96::/112"}}}
	if err := alloc.SetCIDR(feed.ToCIDR(sc)); err != nil {
		t.Fatal(err)
	}
	c := newClusterIPs(alloc, fake.NewClientBuilder().WithScheme(scheme.New()).Build())
	c.trackFamilies(sc, false)

	made := builder.Service("web", "default").Port("http", 80, intstr.FromInt32(8080)).Families(corev1.IPFamilyPolicyPreferDualStack).Obj()
	if _, _, err := c.assign(ctx, made, nil, false); err != nil {
		t.Fatal(err)
	}
	if len(made.Spec.ClusterIPs) != 2 {
		t.Fatalf("a new PreferDualStack Service on a dual-stack cluster got %v, want two families", made.Spec.ClusterIPs)
	}

	old := builder.Service("old", "default").Port("http", 80, intstr.FromInt32(8080)).Families(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv4Protocol).
		ClusterIPs("10.96.0.5").Obj()
	svc := old.DeepCopy()
	svc.Labels = map[string]string{"edited": "yes"}
	if _, _, err := c.assign(ctx, svc, old, false); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 1 || svc.Spec.ClusterIP != "10.96.0.5" {
		t.Fatalf("an update of a single-family PreferDualStack Service changed its ClusterIPs to %v", svc.Spec.ClusterIPs)
	}

	asked := old.DeepCopy()
	asked.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	if _, _, err := c.assign(ctx, asked, old, false); err != nil {
		t.Fatal(err)
	}
	if len(asked.Spec.ClusterIPs) != 2 {
		t.Fatalf("RequireDualStack on update got %v, want a secondary ClusterIP", asked.Spec.ClusterIPs)
	}
}
