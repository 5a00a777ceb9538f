// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

const (
	// ManagedBy is the value of discoveryv1.LabelManagedBy on every slice
	// this controller owns: kube-controller-manager's, because svcnet
	// replaces that controller and consumers (upstream's conformance suite
	// among them) look for its slices by it. The slices kube-controller-manager
	// wrote before svcnet took over are adopted in place, as one
	// kube-controller-manager replica adopts another's.
	ManagedBy = "endpointslice-controller.k8s.io"
	// LegacyManagedBy is the value earlier svcnet releases wrote; their
	// slices are adopted and relabelled ManagedBy at their next sync.
	LegacyManagedBy = "endpointslice-controller.svcnet.io"

	// LabelHeadless marks the slices of a headless Service, as upstream does.
	LabelHeadless = corev1.IsHeadlessService

	// AnnotationTopologyMode switches on topology aware routing (hints
	// computed from Node CPU capacity per zone), as upstream does.
	AnnotationTopologyMode = corev1.AnnotationTopologyMode
	// LabelZone is the Node label read for an endpoint's zone.
	LabelZone = corev1.LabelTopologyZone
)

// portGroup is a set of endpoints that share one list of ports. Pods whose
// named targetPorts resolve to different numbers land in different groups.
type portGroup struct {
	ports     []discoveryv1.EndpointPort
	endpoints map[string]discoveryv1.Endpoint
}

// desiredEndpoints is what a Service should publish for one address family:
// port groups keyed by portKey.
type desiredEndpoints map[string]*portGroup

func (d desiredEndpoints) count() int {
	n := 0
	for _, g := range d {
		n += len(g.endpoints)
	}
	return n
}

// nodeInfo is what the controller needs to know of a Node.
type nodeInfo struct {
	zone string
	// cpu is the allocatable CPU in millicores, for topology-mode Auto.
	cpu int64
	// ready tells whether the Node is Ready, for topology-mode Auto.
	ready bool
	// excluded is set on control-plane Nodes, which topology-mode Auto
	// leaves out of the zones' CPU shares as upstream does.
	excluded bool
}

// computeDesiredEndpoints lists the endpoints a Service should publish for
// one address family, grouped by their resolved ports. nodes maps a Node
// name to what is known of it; a Pod on a Node that is not in the map is
// still listed, without a zone.
func computeDesiredEndpoints(svc *corev1.Service, pods []*corev1.Pod, nodes map[string]nodeInfo, family corev1.IPFamily) desiredEndpoints {
	out := desiredEndpoints{}
	for _, pod := range pods {
		if !podIsCandidate(pod) {
			continue
		}
		ip := podIPOfFamily(pod, family)
		if ip == "" {
			continue
		}
		ports := endpointPorts(svc, pod)
		key := portKey(ports)
		g, ok := out[key]
		if !ok {
			g = &portGroup{ports: ports, endpoints: map[string]discoveryv1.Endpoint{}}
			out[key] = g
		}
		ep := podEndpoint(svc, pod, ip, nodes)
		g.endpoints[endpointKey(ep)] = ep
	}
	return out
}

// podIsCandidate reports whether a Pod can be an endpoint at all: it has an
// IP and has not reached a terminal phase. Terminating Pods stay candidates,
// with the terminating condition set.
func podIsCandidate(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return pod.Status.PodIP != "" || len(pod.Status.PodIPs) > 0
}

// podIPOfFamily returns the Pod's IP of the given family, or "".
func podIPOfFamily(pod *corev1.Pod, family corev1.IPFamily) string {
	candidates := make([]string, 0, len(pod.Status.PodIPs)+1)
	for _, ip := range pod.Status.PodIPs {
		candidates = append(candidates, ip.IP)
	}
	if len(candidates) == 0 && pod.Status.PodIP != "" {
		candidates = append(candidates, pod.Status.PodIP)
	}
	for _, s := range candidates {
		addr, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if addr.Is4() == (family == corev1.IPv4Protocol) {
			return addr.String()
		}
	}
	return ""
}

// endpointPorts resolves the Service's ports against one Pod. A port whose
// named targetPort the Pod does not declare is left out for that Pod, as
// upstream does.
func endpointPorts(svc *corev1.Service, pod *corev1.Pod) []discoveryv1.EndpointPort {
	ports := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		num, ok := resolveTargetPort(pod, sp)
		if !ok {
			continue
		}
		ports = append(ports, discoveryv1.EndpointPort{
			Name:        ptr.To(sp.Name),
			Port:        ptr.To(num),
			Protocol:    ptr.To(sp.Protocol),
			AppProtocol: sp.AppProtocol,
		})
	}
	slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(cmp.Compare(*a.Name, *b.Name), cmp.Compare(*a.Protocol, *b.Protocol))
	})
	return ports
}

// resolveTargetPort finds the number a Service port targets on a Pod. Named
// ports are looked up in the containers and the restartable (sidecar) init
// containers.
func resolveTargetPort(pod *corev1.Pod, sp *corev1.ServicePort) (int32, bool) {
	tp := sp.TargetPort
	if tp.StrVal == "" && tp.IntVal == 0 {
		return sp.Port, true
	}
	if tp.StrVal == "" {
		return tp.IntVal, true
	}
	if n, err := strconv.Atoi(tp.StrVal); err == nil {
		return int32(n), true
	}
	proto := cmp.Or(sp.Protocol, corev1.ProtocolTCP)
	find := func(containers []corev1.Container, sidecarsOnly bool) (int32, bool) {
		for i := range containers {
			c := &containers[i]
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == tp.StrVal && cmp.Or(p.Protocol, corev1.ProtocolTCP) == proto {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	}
	if n, ok := find(pod.Spec.Containers, false); ok {
		return n, true
	}
	return find(pod.Spec.InitContainers, true)
}

// podEndpoint builds the endpoint of one Pod.
func podEndpoint(svc *corev1.Service, pod *corev1.Pod, ip string, nodes map[string]nodeInfo) discoveryv1.Endpoint {
	serving := podReady(pod)
	terminating := pod.DeletionTimestamp != nil
	ready := svc.Spec.PublishNotReadyAddresses || (serving && !terminating)
	ep := discoveryv1.Endpoint{
		Addresses: []string{ip},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(ready),
			Serving:     ptr.To(serving),
			Terminating: ptr.To(terminating),
		},
		TargetRef: &corev1.ObjectReference{
			Kind:      "Pod",
			Namespace: pod.Namespace,
			Name:      pod.Name,
			UID:       pod.UID,
		},
	}
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name {
		ep.Hostname = ptr.To(pod.Spec.Hostname)
	}
	if pod.Spec.NodeName != "" {
		ep.NodeName = ptr.To(pod.Spec.NodeName)
		if n, ok := nodes[pod.Spec.NodeName]; ok && n.zone != "" {
			ep.Zone = ptr.To(n.zone)
		}
	}
	return ep
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// endpointKey identifies an endpoint across syncs: its address and the Pod
// it belongs to (two hostNetwork Pods share an address).
func endpointKey(ep discoveryv1.Endpoint) string {
	addr := ""
	if len(ep.Addresses) > 0 {
		addr = ep.Addresses[0]
	}
	if ep.TargetRef == nil {
		return addr
	}
	return addr + "/" + ep.TargetRef.Name
}

// portKey is a canonical text of a port list: equal lists, equal keys.
func portKey(ports []discoveryv1.EndpointPort) string {
	var b strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&b, "%s/%s/%d/%s;", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0), ptr.Deref(p.AppProtocol, ""))
	}
	return b.String()
}

// sortedPorts returns a copy of a slice's ports in portKey order.
func sortedPorts(ports []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	out := slices.Clone(ports)
	slices.SortFunc(out, func(a, b discoveryv1.EndpointPort) int {
		return cmp.Or(cmp.Compare(ptr.Deref(a.Name, ""), ptr.Deref(b.Name, "")), cmp.Compare(ptr.Deref(a.Protocol, ""), ptr.Deref(b.Protocol, "")))
	})
	return out
}
