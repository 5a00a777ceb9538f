// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svcnet-io/svcnet/allocator/portrange"
)

// TestNodePortHolderReadLive: the allocator, fed by a watch that lags,
// still believes two deleted-or-changed Services hold their ports. A
// request for such a port reads the holder from the API server and gets
// the port; a port whose holder still uses it stays refused, naming it.
func TestNodePortHolderReadLive(t *testing.T) {
	alloc, err := portrange.New(portrange.Options{Range: portrange.Range{First: 30000, Last: 32767}})
	if err != nil {
		t.Fatal(err)
	}
	alloc.Observe(30100, portrange.Owner("ns", "deleted", "http"))
	alloc.Observe(30101, portrange.Owner("ns", "changed", "http"))
	alloc.Observe(30102, portrange.Owner("ns", "kept", "http"))
	nodePortService := func(name string, port int32) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, NodePort: port},
			}},
		}
	}
	live := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		nodePortService("changed", 30200), nodePortService("kept", 30102)).Build()
	n := &nodePorts{alloc: alloc, live: live}

	for _, port := range []int32{30100, 30101} {
		undo, _, err := n.assign(context.Background(), nodePortService("new", port), nil, false)
		if err != nil {
			t.Errorf("port %d, freed in the API server: %v", port, err)
			continue
		}
		defer undo()
	}
	_, _, err = n.assign(context.Background(), nodePortService("new", 30102), nil, false)
	if err == nil || !strings.Contains(err.Error(), "30102") || !strings.Contains(err.Error(), "already allocated to Service ns/kept") {
		t.Errorf("port 30102, still used by ns/kept: err = %v", err)
	}
	_, _, err = n.assign(context.Background(), nodePortService("other", 30100), nil, false)
	if err == nil || !strings.Contains(err.Error(), "already allocated to Service ns/new") {
		t.Errorf("port 30100, reserved for ns/new: err = %v", err)
	}
}
