package admission

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/portrange"
)

// nodePorts chooses nodePorts and healthCheckNodePorts.
type nodePorts struct {
	alloc *portrange.Allocator
}

func needsNodePorts(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
}

func needsHealthCheckNodePort(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// assign fills missing nodePorts and the healthCheckNodePort, and checks the
// explicit ones, with kube-apiserver's rules: ports of one Service with the
// same number and different protocols share a nodePort;
// allocateLoadBalancerNodePorts: false allocates none.
func (n *nodePorts) assign(_ context.Context, svc, old *corev1.Service, dryRun bool) (undo func(), warnings []string, err error) {
	type held struct {
		port  int
		owner string
	}
	var reserved []held
	undo = func() {
		for _, h := range reserved {
			n.alloc.Release(h.port, h.owner)
		}
	}
	fail := func(e error) (func(), []string, error) {
		undo()
		return nil, nil, e
	}
	if !needsNodePorts(svc) {
		return undo, nil, nil
	}
	svcKey := svc.Namespace + "/" + svc.Name
	had := map[int32]bool{}
	if old != nil {
		for _, p := range old.Spec.Ports {
			had[p.NodePort] = true
		}
		had[old.Spec.HealthCheckNodePort] = true
	}
	static := func(port int, owner, field string) error {
		if had[int32(port)] {
			return nil // committed before
		}
		if err := n.alloc.Reserve(port, owner, svcKey, dryRun); err != nil {
			allocationErrors.WithLabelValues("nodeport", "static").Inc()
			return userError{fmt.Sprintf("%s: Invalid value: %d: %v", field, port, err)}
		}
		allocations.WithLabelValues("nodeport", "static").Inc()
		if !dryRun {
			reserved = append(reserved, held{port, owner})
		}
		return nil
	}
	dynamic := func(owner string) (int, error) {
		got, err := n.alloc.Allocate(owner, dryRun)
		if err != nil {
			allocationErrors.WithLabelValues("nodeport", "dynamic").Inc()
			if errors.Is(err, portrange.ErrFull) {
				return 0, userError{fmt.Sprintf("failed to allocate a nodePort: %v", err)}
			}
			return 0, err
		}
		allocations.WithLabelValues("nodeport", "dynamic").Inc()
		if got.QuarantineCut {
			warnings = append(warnings, fmt.Sprintf("nodePort %d was released less than the reuse delay ago: the range has no other free port", got.Port))
		}
		if !dryRun {
			reserved = append(reserved, held{got.Port, owner})
		}
		return got.Port, nil
	}
	allocate := ptr.Deref(svc.Spec.AllocateLoadBalancerNodePorts, true) || svc.Spec.Type == corev1.ServiceTypeNodePort
	byNumber := map[int32]int32{}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		field := fmt.Sprintf("spec.ports[%d].nodePort", i)
		owner := portrange.Owner(svc.Namespace, svc.Name, feed.PortName(*p))
		shared, seen := byNumber[p.Port]
		switch {
		case p.NodePort != 0 && seen && p.NodePort == shared:
			// the same nodePort as a sibling with another protocol
		case p.NodePort != 0:
			if err := static(int(p.NodePort), owner, field); err != nil {
				return fail(err)
			}
			if !seen {
				byNumber[p.Port] = p.NodePort
			}
		case seen:
			p.NodePort = shared
		case allocate:
			port, err := dynamic(owner)
			if err != nil {
				return fail(err)
			}
			p.NodePort = int32(port)
			byNumber[p.Port] = p.NodePort
		}
	}
	if needsHealthCheckNodePort(svc) {
		owner := portrange.Owner(svc.Namespace, svc.Name, feed.HealthPortName)
		if svc.Spec.HealthCheckNodePort != 0 {
			if err := static(int(svc.Spec.HealthCheckNodePort), owner, "spec.healthCheckNodePort"); err != nil {
				return fail(err)
			}
		} else {
			port, err := dynamic(owner)
			if err != nil {
				return fail(err)
			}
			svc.Spec.HealthCheckNodePort = int32(port)
		}
	}
	return undo, warnings, nil
}
