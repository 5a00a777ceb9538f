// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package feed

import (
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/svcnet-io/svcnet/allocator/portrange"
	"github.com/svcnet-io/svcnet/internal/platform/tombstone"
)

// PortName names a Service port for stickiness: its name, else its number
// and protocol.
func PortName(p corev1.ServicePort) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("%d-%s", p.Port, p.Protocol)
}

// HealthPortName names the healthCheckNodePort among a Service's ports.
const HealthPortName = "health-check"

// NodePortUse is one nodePort a Service uses, and for which of its ports.
type NodePortUse struct {
	Port  int
	Owner string
}

// NodePortUses lists the nodePorts svc holds (kube-apiserver keeps them
// whatever its type says, until it clears the fields).
func NodePortUses(svc *corev1.Service) []NodePortUse {
	var out []NodePortUse
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			out = append(out, NodePortUse{int(p.NodePort), portrange.Owner(svc.Namespace, svc.Name, PortName(p))})
		}
	}
	if svc.Spec.HealthCheckNodePort != 0 {
		out = append(out, NodePortUse{int(svc.Spec.HealthCheckNodePort), portrange.Owner(svc.Namespace, svc.Name, HealthPortName)})
	}
	return out
}

// NodePortHandler feeds the nodePorts of Services to a: ports that appear
// are used, ports that go away are released under the Service port that
// held them.
func NodePortHandler(a *portrange.Allocator) toolscache.ResourceEventHandler {
	var mu sync.Mutex
	seen := map[string][]NodePortUse{}
	apply := func(key string, uses []NodePortUse) {
		mu.Lock()
		defer mu.Unlock()
		old := seen[key]
		for _, u := range uses {
			if !containsUse(old, u) {
				a.Observe(u.Port, u.Owner)
			}
		}
		for _, u := range old {
			if !containsUse(uses, u) {
				a.Forget(u.Port, u.Owner)
			}
		}
		if len(uses) == 0 {
			delete(seen, key)
		} else {
			seen[key] = uses
		}
	}
	set := func(obj any) {
		if svc, ok := obj.(*corev1.Service); ok {
			apply(ServiceKey(svc), NodePortUses(svc))
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if svc, ok := tombstone.As[*corev1.Service](obj); ok {
				apply(ServiceKey(svc), nil)
			}
		},
	}
}

func containsUse(list []NodePortUse, u NodePortUse) bool {
	for _, x := range list {
		if x == u {
			return true
		}
	}
	return false
}
