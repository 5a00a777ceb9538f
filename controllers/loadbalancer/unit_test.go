// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// The pool informer's handler and the controller's watch are not ordered:
// a reconcile may run on a grown pool before the handler fed the growth to
// the allocator. It must still allocate from what its cache shows.
func TestReconcileSeesPoolGrowthBeforeTheHandler(t *testing.T) {
	ctx := context.Background()
	grown := &svcnetv1alpha1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "tiny", UID: "pool-uid", Generation: 2},
		Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.105.1/32", "192.168.105.2/32"}},
	}
	second := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "ns", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Port: 80}}},
	}
	b := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithObjects(grown, second, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}).
		WithStatusSubresource(&corev1.Service{}, &svcnetv1alpha1.LoadBalancerIPPool{})
	for _, ix := range indexes {
		b = b.WithIndex(ix.obj, ix.name, ix.fn)
	}
	c := b.Build()
	r := New(c, c, events.NewFakeRecorder(10), DefaultOptions())

	// What the handler fed so far: generation 1, one address, taken.
	old := grown.DeepCopy()
	old.Generation, old.Spec.CIDRs = 1, []string{"192.168.105.1/32"}
	r.setPool(old)
	r.alloc.Observe(netip.MustParseAddr("192.168.105.1"), "ns/first")

	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(second)}); err != nil {
		t.Fatal(err)
	}
	var got corev1.Service
	if err := c.Get(ctx, client.ObjectKeyFromObject(second), &got); err != nil {
		t.Fatal(err)
	}
	if ing := got.Status.LoadBalancer.Ingress; len(ing) != 1 || ing[0].IP != "192.168.105.2" {
		t.Fatalf("ingress %+v, want 192.168.105.2 from the grown pool", ing)
	}

	// The handler's late delivery of the older version changes nothing.
	r.setPool(old)
	if pools := r.alloc.PoolsOf(netip.MustParseAddr("192.168.105.2")); len(pools) != 1 || pools[0] != "tiny" {
		t.Fatalf("a late, older version of the pool replaced the newer one: 192.168.105.2 is in %v", pools)
	}

	// A late delete of an earlier pool of that name changes nothing.
	r.forgetPool("tiny", "an-earlier-uid")
	if pools := r.alloc.PoolsOf(netip.MustParseAddr("192.168.105.2")); len(pools) != 1 {
		t.Fatalf("the delete of an earlier incarnation took the pool out: 192.168.105.2 is in %v", pools)
	}

	// A pool gone from the cache is gone from the allocator at the next
	// reconcile, even before the handler's delete.
	if err := c.Delete(ctx, grown); err != nil {
		t.Fatal(err)
	}
	if _, err := r.poolStates(ctx); err != nil {
		t.Fatal(err)
	}
	if pools := r.alloc.PoolsOf(netip.MustParseAddr("192.168.105.2")); len(pools) != 0 {
		t.Fatalf("deleted pool still in the allocator: %v", pools)
	}
}
