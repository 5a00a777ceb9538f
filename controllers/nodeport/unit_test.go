// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/allocator/portrange"
)

// Two Services with one nodePort cannot be created through kube-apiserver
// (its bitmap refuses), so this case is checked against a fake client.
func TestDuplicateNamesBothServices(t *testing.T) {
	svc := func(name string, proto corev1.Protocol) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: proto}}},
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithObjects(svc("a", corev1.ProtocolTCP), svc("b", corev1.ProtocolTCP), svc("c", corev1.ProtocolUDP)).
		WithIndex(&corev1.Service{}, portIndex, func(o client.Object) []string { return portKeys(o.(*corev1.Service)) }).
		Build()
	rec := events.NewFakeRecorder(10)
	rng, _ := portrange.ParseRange("30000-32767")
	r, err := New(c, nil, rec, portrange.Options{Range: rng}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second pass is de-duplicated
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d Events, want 1", len(rec.Events))
	}
	got := <-rec.Events
	if !strings.Contains(got, ReasonAlreadyAllocated) || !strings.Contains(got, "also ns/b") || strings.Contains(got, "ns/c") {
		t.Fatalf("Event %q should name ns/b (same port and protocol) and not ns/c (UDP)", got)
	}
}
