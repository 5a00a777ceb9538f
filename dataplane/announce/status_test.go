// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"context"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// TestReleaseOfAnAddressNoLongerSelected: when the announcement stops
// selecting the node that answers for an address, that node's letting go
// is written (no other node may be there to write it), so the Service's
// condition does not keep naming it; an address it did not answer for
// writes nothing.
func TestReleaseOfAnAddressNoLongerSelected(t *testing.T) {
	owned, other := netip.MustParseAddr("192.168.240.1"), netip.MustParseAddr("192.168.240.2")
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	web.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Reason: ReasonL2,
		Message: "192.168.240.1 answered by node-2 (ARP on eth0)", LastTransitionTime: metav1.Now()}}
	db := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}}
	db.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Reason: ReasonL2,
		Message: "192.168.240.2 answered by node-1 (ARP on eth0)", LastTransitionTime: metav1.Now()}}
	c := fake.NewClientBuilder().WithObjects(web, db).WithStatusSubresource(&corev1.Service{}).Build()
	w := newStatusWriter(c, c, nil, "node-2", logr.Discard())
	w.owns = func(a netip.Addr) bool { return a == owned }
	w.setPlan(plan{l2: []addrPlan{
		{addr: owned, services: []types.NamespacedName{{Namespace: "default", Name: "web"}}, candidates: []string{"node-2"}},
		{addr: other, services: []types.NamespacedName{{Namespace: "default", Name: "db"}}, candidates: []string{"node-1", "node-2"}},
	}})
	w.setPlan(plan{})

	ctx := context.Background()
	w.write(ctx, l2Change{addr: owned, iface: "eth0"})
	w.write(ctx, l2Change{addr: other, iface: "eth0"})

	cond := func(name string) *metav1.Condition {
		var svc corev1.Service
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &svc); err != nil {
			t.Fatal(err)
		}
		return apimeta.FindStatusCondition(svc.Status.Conditions, svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced)
	}
	if got := cond("web"); got.Status != metav1.ConditionFalse || got.Reason != ReasonNoCandidate {
		t.Errorf("web after node-2 let go of its address, no longer selected: %s %s %q, want False %s", got.Status, got.Reason, got.Message, ReasonNoCandidate)
	}
	if got := cond("db"); got.Status != metav1.ConditionTrue || got.Message != "192.168.240.2 answered by node-1 (ARP on eth0)" {
		t.Errorf("db, whose address node-2 did not answer for: %s %q, want it unchanged", got.Status, got.Message)
	}
	if len(w.left) != 0 {
		t.Errorf("addresses kept after their release was written: %v", w.left)
	}
}
