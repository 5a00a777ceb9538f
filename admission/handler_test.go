// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// fakePart sets a ClusterIP or fails, and records undo calls.
type fakePart struct {
	err    error
	undone *int
}

func (f fakePart) assign(_ context.Context, svc, _ *corev1.Service, _ bool) (func(), []string, error) {
	if f.err != nil {
		return nil, nil, f.err
	}
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.96.1.1", []string{"10.96.1.1"}
	return func() { *f.undone++ }, []string{"a warning"}, nil
}

func request(t *testing.T) admission.Request {
	t.Helper()
	raw, err := json.Marshal(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}})
	if err != nil {
		t.Fatal(err)
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ns", Name: "web", Object: runtime.RawExtension{Raw: raw},
	}}
}

func TestHandler(t *testing.T) {
	undone := 0
	tests := map[string]struct {
		parts       []assigner
		active      bool
		wantAllowed bool
		wantPatch   bool
		wantUndo    int
		wantMessage string
	}{
		"not the leader: unchanged, kube-apiserver allocates": {parts: []assigner{fakePart{undone: &undone}}, active: false, wantAllowed: true},
		"patched": {parts: []assigner{fakePart{undone: &undone}}, active: true, wantAllowed: true, wantPatch: true},
		"user error denies and gives back what earlier parts held": {
			parts: []assigner{fakePart{undone: &undone}, fakePart{err: userError{"spec.ports[0].nodePort: Invalid value"}}}, active: true,
			wantUndo: 1, wantMessage: "spec.ports[0].nodePort: Invalid value",
		},
		"internal error lets the request through unchanged": {
			parts: []assigner{fakePart{undone: &undone}, fakePart{err: errors.New("cache gone")}}, active: true,
			wantAllowed: true, wantUndo: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			undone = 0
			h := &Handler{decoder: admission.NewDecoder(scheme.Scheme), parts: tc.parts, active: func() bool { return tc.active }}
			resp := h.Handle(context.Background(), request(t))
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v (%v)", resp.Allowed, resp.Result)
			}
			if got := len(resp.Patches) > 0; got != tc.wantPatch {
				t.Fatalf("patches = %v", resp.Patches)
			}
			if undone != tc.wantUndo {
				t.Fatalf("undone %d times, want %d", undone, tc.wantUndo)
			}
			if tc.wantMessage != "" && resp.Result.Message != tc.wantMessage {
				t.Fatalf("message = %q", resp.Result.Message)
			}
		})
	}
}

// TestKeepNodePorts: an update that leaves a port's nodePort out keeps the
// nodePort of the old port with the same name, as kube-apiserver's update
// (pkg/registry/core/service/storage patchAllocatedValues) does.
func TestKeepNodePorts(t *testing.T) {
	port := func(name string, number, nodePort int32, proto corev1.Protocol) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: number, NodePort: nodePort, Protocol: proto}
	}
	tests := map[string]struct {
		old, updated []corev1.ServicePort
		want         []int32
	}{
		"a changed port number keeps the nodePort": {
			old:     []corev1.ServicePort{port("http", 80, 30080, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("http", 8080, 0, corev1.ProtocolTCP)},
			want:    []int32{30080},
		},
		"a changed protocol keeps the nodePort": {
			old:     []corev1.ServicePort{port("dns", 53, 30053, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("dns", 53, 0, corev1.ProtocolUDP)},
			want:    []int32{30053},
		},
		"a renamed port gets none (the allocator picks one)": {
			old:     []corev1.ServicePort{port("http", 80, 30080, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("web", 80, 0, corev1.ProtocolTCP)},
			want:    []int32{0},
		},
		"the unnamed single port keeps its nodePort": {
			old:     []corev1.ServicePort{port("", 80, 30080, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("", 81, 0, corev1.ProtocolTCP)},
			want:    []int32{30080},
		},
		"an old nodePort given explicitly to another port is not copied": {
			old:     []corev1.ServicePort{port("http", 80, 30080, corev1.ProtocolTCP), port("admin", 81, 30081, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("http", 8080, 0, corev1.ProtocolTCP), port("admin", 81, 30080, corev1.ProtocolTCP)},
			want:    []int32{0, 30080},
		},
		"explicit nodePorts stay": {
			old:     []corev1.ServicePort{port("http", 80, 30080, corev1.ProtocolTCP)},
			updated: []corev1.ServicePort{port("http", 80, 30099, corev1.ProtocolTCP)},
			want:    []int32{30099},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			svc := func(ports []corev1.ServicePort) *corev1.Service {
				return &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", Ports: ports}}
			}
			updated := svc(tc.updated)
			keepAllocated(updated, svc(tc.old))
			var got []int32
			for _, p := range updated.Spec.Ports {
				got = append(got, p.NodePort)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("nodePorts = %v, want %v", got, tc.want)
			}
		})
	}
}
