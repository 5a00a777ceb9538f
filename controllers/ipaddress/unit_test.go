// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipaddress

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// kube-apiserver's own repair loop races this audit for a missing
// IPAddress in the envtest suite; here the audit runs alone.
func TestMissingIPAddressRecreatedWithOneEvent(t *testing.T) {
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}},
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(svc, sc).Build()
	rec := events.NewFakeRecorder(10)
	r := New(c, c, rec, Options{EventQuietPeriod: time.Hour, LeakGracePeriod: time.Minute})
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(svc)}

	for round := range 2 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		ipa := &networkingv1.IPAddress{}
		if err := c.Get(ctx, client.ObjectKey{Name: "10.96.0.10"}, ipa); err != nil {
			t.Fatalf("round %d: IPAddress not recreated: %v", round, err)
		}
		if ref := ipa.Spec.ParentRef; ref == nil || ref.Resource != "services" || ref.Namespace != "ns" || ref.Name != "web" {
			t.Fatalf("round %d: IPAddress references %+v, want services ns/web", round, ipa.Spec.ParentRef)
		}
		if got := ipa.Labels[networkingv1.LabelManagedBy]; got != ManagedBy {
			t.Fatalf("round %d: managed-by %q, want %q", round, got, ManagedBy)
		}
		if err := c.Delete(ctx, ipa); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d Events for two repairs within the quiet period, want 1", len(rec.Events))
	}
	if ev := <-rec.Events; !strings.Contains(ev, ReasonNotAllocated) || !strings.Contains(ev, "10.96.0.10 is not allocated") {
		t.Fatalf("Event %q, want %s about 10.96.0.10", ev, ReasonNotAllocated)
	}
}

// Without kube-apiserver's own repair loop, which would replace them: the
// audit leaves IPAddresses of other managers alone, even one that holds a
// Service's ClusterIP, and restores the labels of a Service's own.
func TestOtherManagersIPAddresses(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}},
	}
	toWeb := &networkingv1.ParentReference{Resource: "services", Namespace: "ns", Name: "web"}
	cases := map[string]struct {
		labels     map[string]string
		parent     *networkingv1.ParentReference
		wantLabels map[string]string // nil: untouched
	}{
		"another manager's, for something else": {
			labels: map[string]string{networkingv1.LabelManagedBy: "other.example.com"},
			parent: &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"},
		},
		"unlabelled, for something else": {
			parent: &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"},
		},
		"another manager's, for this Service": {
			labels: map[string]string{networkingv1.LabelManagedBy: "other.example.com"},
			parent: toWeb,
		},
		"this Service's, labels removed": {
			parent:     toWeb,
			wantLabels: map[string]string{networkingv1.LabelManagedBy: ManagedBy, networkingv1.LabelIPAddressFamily: "IPv4"},
		},
		"this Service's, wrong family": {
			labels:     map[string]string{networkingv1.LabelManagedBy: ManagedBy, networkingv1.LabelIPAddressFamily: "IPv6"},
			parent:     toWeb,
			wantLabels: map[string]string{networkingv1.LabelManagedBy: ManagedBy, networkingv1.LabelIPAddressFamily: "IPv4"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ipa := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.10", Labels: tc.labels}, Spec: networkingv1.IPAddressSpec{ParentRef: tc.parent}}
			sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
			c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(svc.DeepCopy(), sc, ipa).Build()
			if err := c.Get(ctx, client.ObjectKeyFromObject(ipa), ipa); err != nil {
				t.Fatal(err)
			}
			r := New(c, c, events.NewFakeRecorder(10), Options{EventQuietPeriod: time.Hour, LeakGracePeriod: 0})
			for _, req := range []ctrl.Request{{NamespacedName: client.ObjectKeyFromObject(svc)}, {NamespacedName: client.ObjectKey{Name: ipa.Name}}} {
				if _, err := r.Reconcile(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			var got networkingv1.IPAddress
			if err := c.Get(ctx, client.ObjectKeyFromObject(ipa), &got); err != nil {
				t.Fatalf("IPAddress gone: %v", err)
			}
			if got.UID != ipa.UID {
				t.Fatal("IPAddress replaced")
			}
			if tc.wantLabels == nil {
				if got.ResourceVersion != ipa.ResourceVersion {
					t.Errorf("IPAddress written: labels %v", got.Labels)
				}
				return
			}
			if diff := cmp.Diff(tc.wantLabels, got.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
		})
	}
}
