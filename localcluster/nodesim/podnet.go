// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// A Pod's network: its own namespace wired to its node with an address
// of the node's Pod CIDR (none on the host network), and the stand-in
// servers of the containers whose images are not run for real.

// startNetwork makes the Pod's namespace with an address of its node and
// a server on each containerPort its Programs do not serve.
func (r *podReconciler) startNetwork(pod *corev1.Pod, node *nodeState) (*netlab.Pod, error) {
	ips, err := r.takeIPs(node, pod)
	if err != nil {
		return nil, err
	}
	np, err := node.Net.NewPod(podRole(pod), ips[0], ips[1:]...)
	if err != nil {
		r.releaseIPs(node.Name, ips)
		return nil, err
	}
	name := []byte(pod.Name + "\n")
	for _, p := range servedPorts(pod, r.images) {
		switch p.Protocol {
		case corev1.ProtocolUDP:
			err = np.ServeUDP(int(p.ContainerPort), func(net.Addr) []byte { return name })
		default:
			err = np.ServeHTTP(int(p.ContainerPort), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(name) }))
		}
		if err != nil {
			_ = np.Remove()
			r.releaseIPs(node.Name, ips)
			return nil, fmt.Errorf("serving %s port %d: %w", p.Protocol, p.ContainerPort, err)
		}
	}
	return np, nil
}

// removeNetwork removes the Pod's namespace and frees its address.
func (r *podReconciler) removeNetwork(run *runningPod) error {
	if run.net == nil {
		return nil
	}
	err := run.net.Remove()
	r.releaseIPs(run.node, run.net.IPs)
	return err
}

// podRole names the Pod's namespace: "pod-<namespace>-<name>", cut with a
// hash to stay a valid file name.
func podRole(pod *corev1.Pod) string {
	role := "pod-" + pod.Namespace + "-" + pod.Name
	if len(role) > 200 {
		role = fmt.Sprintf("%s-%s", role[:180], string(pod.UID)[:8])
	}
	return role
}

// servedPorts are the TCP and UDP containerPorts (restartable init
// containers included), each once, of the Pod's stand-in containers
// (whose images are not run for real); DefaultPort when the Pod declares
// none and runs nothing for real.
func servedPorts(pod *corev1.Pod, store *images.Store) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	seen := map[string]bool{}
	add := func(c corev1.Container) {
		if _, ok := store.Lookup(c.Image); ok {
			return
		}
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			k := fmt.Sprintf("%s/%d", proto, p.ContainerPort)
			if proto == corev1.ProtocolSCTP || seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, corev1.ContainerPort{ContainerPort: p.ContainerPort, Protocol: proto})
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	if len(out) == 0 && !runsReal(store, pod) {
		out = append(out, corev1.ContainerPort{ContainerPort: DefaultPort, Protocol: corev1.ProtocolTCP})
	}
	return out
}

// takeIPs picks the Pod's addresses, one in each of the node's Pod CIDRs.
func (r *podReconciler) takeIPs(node *nodeState, pod *corev1.Pod) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ips []netip.Addr
	for _, cidr := range node.Net.PodCIDRs {
		ip, err := takeIP(node, cidr, pod)
		if err != nil {
			for _, a := range ips {
				delete(node.used, a)
			}
			return nil, err
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// takeIP picks the Pod's address in cidr: the one it already reports, if
// it is in cidr and free (a restart of svcnet up keeps addresses), else
// the lowest free one (the network address and the next are never used).
func takeIP(node *nodeState, cidr netip.Prefix, pod *corev1.Pod) (netip.Addr, error) {
	for _, reported := range pod.Status.PodIPs {
		prev, err := netip.ParseAddr(reported.IP)
		if err == nil && cidr.Contains(prev) && prev != cidr.Addr() && prev != cidr.Addr().Next() && !node.used[prev] && !isBroadcast(cidr, prev) {
			node.used[prev] = true
			return prev, nil
		}
	}
	for a := cidr.Addr().Next().Next(); cidr.Contains(a); a = a.Next() {
		if isBroadcast(cidr, a) {
			break
		}
		if !node.used[a] {
			node.used[a] = true
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s has no free address left in its Pod CIDR %s", node.Name, cidr)
}

func isBroadcast(cidr netip.Prefix, a netip.Addr) bool {
	return a.Is4() && !cidr.Contains(a.Next())
}

func (r *podReconciler) releaseIPs(node string, ips []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := r.nodes[node]; n != nil {
		for _, ip := range ips {
			delete(n.used, ip)
		}
	}
}

// runsReal tells whether any of pod's containers runs for real.
func runsReal(store *images.Store, pod *corev1.Pod) bool {
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if _, ok := store.Lookup(c.Image); ok {
			return true
		}
	}
	return false
}
