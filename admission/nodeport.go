// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/allocator/feed"
	"github.com/svcnet-io/svcnet/allocator/portrange"
)

// nodePorts chooses nodePorts and healthCheckNodePorts.
type nodePorts struct {
	alloc *portrange.Allocator
	// live reads the API server itself, not the cache: whether the Service
	// the allocator believes holds a port still does.
	live client.Reader
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
func (n *nodePorts) assign(ctx context.Context, svc, old *corev1.Service, dryRun bool) (undo func(), warnings []string, err error) {
	a := &portAssignment{ctx: ctx, n: n, svcKey: feed.ServiceKey(svc), dryRun: dryRun, committed: committedPorts(old)}
	if !needsNodePorts(svc) {
		return a.undo, nil, nil
	}
	if err := a.servicePorts(svc); err != nil {
		a.undo()
		return nil, nil, err
	}
	if err := a.healthCheckPort(svc); err != nil {
		a.undo()
		return nil, nil, err
	}
	return a.undo, a.warnings, nil
}

// portAssignment is one request's reservations, to undo if the request
// fails or is refused later.
type portAssignment struct {
	ctx       context.Context
	n         *nodePorts
	svcKey    string
	dryRun    bool
	committed map[int32]bool
	reserved  []heldPort
	warnings  []string
}

type heldPort struct {
	port  int
	owner string
}

// committedPorts are the ports the Service already held before this
// update: kube-apiserver committed them, nothing to reserve.
func committedPorts(old *corev1.Service) map[int32]bool {
	had := map[int32]bool{}
	if old != nil {
		for _, p := range old.Spec.Ports {
			had[p.NodePort] = true
		}
		had[old.Spec.HealthCheckNodePort] = true
	}
	return had
}

func (a *portAssignment) undo() {
	for _, h := range a.reserved {
		a.n.alloc.Release(h.port, h.owner)
	}
}

// static reserves a port the user asked for.
func (a *portAssignment) static(port int, owner, field string) error {
	if a.committed[int32(port)] {
		return nil
	}
	err := a.n.alloc.Reserve(port, owner, a.svcKey, a.dryRun)
	if errors.Is(err, portrange.ErrAllocated) {
		gone, lerr := a.n.holderGone(a.ctx, port)
		if lerr != nil {
			return lerr
		}
		if gone {
			err = a.n.alloc.Reserve(port, owner, a.svcKey, a.dryRun)
		}
	}
	if err != nil {
		countNodePortError(scopeStatic, a.dryRun)
		return userError{fmt.Sprintf("%s: Invalid value: %d: %v", field, port, err)}
	}
	countNodePort(scopeStatic, a.dryRun)
	if !a.dryRun {
		a.reserved = append(a.reserved, heldPort{port, owner})
	}
	return nil
}

// holderGone reads the Service the allocator believes holds port from the
// API server and, if it was deleted or no longer uses port, evicts it:
// the Services' watch lags the API server, and a port a client just freed
// there (upstream's "should prevent NodePort collisions" deletes a Service
// and at once asks for its port) is free, as in kube-apiserver.
func (n *nodePorts) holderGone(ctx context.Context, port int) (bool, error) {
	holder, ok := n.alloc.Holder(port)
	if !ok {
		return false, nil // reserved by a request in flight: really taken
	}
	ns, name, _ := strings.Cut(holder, "/")
	var svc corev1.Service
	err := n.live.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("reading Service %s, which holds nodePort %d: %w", holder, port, err)
	case slices.ContainsFunc(feed.NodePortUses(&svc), func(u feed.NodePortUse) bool { return u.Port == port }):
		return false, nil
	}
	return n.alloc.Evict(port, holder), nil
}

// dynamic allocates a free port.
func (a *portAssignment) dynamic(owner string) (int32, error) {
	got, err := a.n.alloc.Allocate(owner, a.dryRun)
	if err != nil {
		countNodePortError(scopeDynamic, a.dryRun)
		if errors.Is(err, portrange.ErrFull) {
			return 0, userError{fmt.Sprintf("failed to allocate a nodePort: %v", err)}
		}
		return 0, err
	}
	countNodePort(scopeDynamic, a.dryRun)
	if got.QuarantineCut {
		a.warnings = append(a.warnings, fmt.Sprintf("nodePort %d was released less than the reuse delay ago: the range has no other free port", got.Port))
	}
	if !a.dryRun {
		a.reserved = append(a.reserved, heldPort{got.Port, owner})
	}
	return int32(got.Port), nil
}

// servicePorts checks or fills spec.ports[].nodePort.
func (a *portAssignment) servicePorts(svc *corev1.Service) error {
	allocate := ptr.Deref(svc.Spec.AllocateLoadBalancerNodePorts, true) || svc.Spec.Type == corev1.ServiceTypeNodePort
	byNumber := map[int32]int32{}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		owner := portrange.Owner(svc.Namespace, svc.Name, feed.PortName(*p))
		shared, seen := byNumber[p.Port]
		switch {
		case p.NodePort != 0 && seen && p.NodePort == shared:
			// the same nodePort as a sibling with another protocol
		case p.NodePort != 0:
			if err := a.static(int(p.NodePort), owner, fmt.Sprintf("spec.ports[%d].nodePort", i)); err != nil {
				return err
			}
			if !seen {
				byNumber[p.Port] = p.NodePort
			}
		case seen:
			p.NodePort = shared
		case allocate:
			port, err := a.dynamic(owner)
			if err != nil {
				return err
			}
			p.NodePort = port
			byNumber[p.Port] = port
		}
	}
	return nil
}

// healthCheckPort checks or fills spec.healthCheckNodePort where the
// Service needs one.
func (a *portAssignment) healthCheckPort(svc *corev1.Service) error {
	if !needsHealthCheckNodePort(svc) {
		return nil
	}
	owner := portrange.Owner(svc.Namespace, svc.Name, feed.HealthPortName)
	if svc.Spec.HealthCheckNodePort != 0 {
		return a.static(int(svc.Spec.HealthCheckNodePort), owner, "spec.healthCheckNodePort")
	}
	port, err := a.dynamic(owner)
	if err != nil {
		return err
	}
	svc.Spec.HealthCheckNodePort = port
	return nil
}
