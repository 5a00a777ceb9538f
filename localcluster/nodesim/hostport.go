// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// hostPorts: a container's hostPort is the node's, as the CNI portmap
// plugin makes it: traffic to the node's address (or the hostIP the port
// names, loopback included) on that port and protocol is sent to the Pod's
// port, whether it arrives from outside or starts on the node (a
// hostNetwork Pod). The rules live in a table of their own in the node's
// namespace, written whole on every change.

// hostPortTable is the nftables table of each node's hostPorts.
const hostPortTable = "svcnet-hostports"

// hostPort is one mapping of a Pod's.
type hostPort struct {
	// hostIP is the address the port is bound to; invalid: every address
	// of the node.
	hostIP   netip.Addr
	port     int32
	protocol string // tcp or udp
	podIP    netip.Addr
	podPort  int32
	owner    string // namespace/name, in the rule's comment
}

// hostPortsOf are pod's hostPort mappings to its addresses ips, one a
// family (TCP and UDP; SCTP is not mapped): each port to the Pod's address
// of each family, or of its hostIP's family alone. A hostNetwork Pod
// listens on the node itself: nothing to map.
func hostPortsOf(pod *corev1.Pod, ips []netip.Addr) ([]hostPort, error) {
	if pod.Spec.HostNetwork {
		return nil, nil
	}
	var out []hostPort
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort == 0 || p.Protocol == corev1.ProtocolSCTP {
				continue
			}
			hp := hostPort{port: p.HostPort, protocol: "tcp", podPort: p.ContainerPort, owner: pod.Namespace + "/" + pod.Name}
			if p.Protocol == corev1.ProtocolUDP {
				hp.protocol = "udp"
			}
			if p.HostIP != "" && p.HostIP != "0.0.0.0" && p.HostIP != "::" {
				a, err := netip.ParseAddr(p.HostIP)
				if err != nil {
					return nil, fmt.Errorf("container %s: hostIP %q is not an IP address", c.Name, p.HostIP)
				}
				hp.hostIP = a
			}
			for _, ip := range ips {
				if !hp.hostIP.IsValid() || hp.hostIP.Is4() == ip.Is4() {
					hp.podIP = ip
					out = append(out, hp)
				}
			}
		}
	}
	return out, nil
}

// nodeHostPorts are the hostPort mappings of one node's Pods, by Pod UID;
// a change is written whole, one at a time.
type nodeHostPorts struct {
	mu    sync.Mutex
	byPod map[types.UID][]hostPort
}

// mapHostPorts adds pod's mappings to its node's rules.
func (r *podReconciler) mapHostPorts(pod *corev1.Pod, node *nodeState, ips []netip.Addr) ([]hostPort, error) {
	hps, err := hostPortsOf(pod, ips)
	if err != nil || len(hps) == 0 {
		return hps, err
	}
	return hps, node.hostPorts.change(node, pod.UID, hps)
}

// unmapHostPorts removes run's mappings from its node's rules.
func (r *podReconciler) unmapHostPorts(node *nodeState, run *runningPod) error {
	if len(run.hostPorts) == 0 {
		return nil
	}
	return node.hostPorts.change(node, run.uid, nil)
}

// change sets (or, with none, removes) a Pod's mappings and writes the
// node's rules.
func (h *nodeHostPorts) change(node *nodeState, uid types.UID, hps []hostPort) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byPod == nil {
		h.byPod = map[types.UID][]hostPort{}
	}
	if len(hps) == 0 {
		delete(h.byPod, uid)
	} else {
		h.byPod[uid] = hps
	}
	var all []hostPort
	for _, uid := range slices.Sorted(maps.Keys(h.byPod)) {
		all = append(all, h.byPod[uid]...)
	}
	return writeHostPorts(node, all)
}

// writeHostPorts replaces the node's hostPort table with hps, atomically.
func writeHostPorts(node *nodeState, hps []hostPort) error {
	var rules bytes.Buffer
	for _, hp := range hps {
		family := "ip"
		if hp.podIP.Is6() {
			family = "ip6"
		}
		match := "meta nfproto ipv4 fib daddr type local"
		switch {
		case hp.hostIP.IsValid():
			match = family + " daddr " + hp.hostIP.String()
		case hp.podIP.Is6():
			match = "meta nfproto ipv6 fib daddr type local"
		}
		to := net.JoinHostPort(hp.podIP.String(), strconv.Itoa(int(hp.podPort)))
		fmt.Fprintf(&rules, "\t\t%s %s dport %d dnat %s to %s comment %q\n", match, hp.protocol, hp.port, family, to, hp.owner)
	}
	script := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain prerouting {
		type nat hook prerouting priority -105; policy accept;
%[2]s	}
	chain output {
		type nat hook output priority -105; policy accept;
%[2]s	}
	chain postrouting {
		type nat hook postrouting priority 95; policy accept;
		ip saddr 127.0.0.0/8 ct status dnat masquerade
	}
}
`, hostPortTable, rules.String())
	path := netlab.Path(node.Net.NetNS)
	// Loopback hostIPs: a packet from 127.0.0.1 sent on to the Pod is not
	// a martian (then masqueraded above), as the portmap plugin allows.
	if err := netns.Do(path, func() error {
		return os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf/all/route_localnet"), []byte("1"), 0o644)
	}); err != nil {
		return fmt.Errorf("allowing loopback hostIPs on node %s: %w", node.Name, err)
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Run(path, cmd); err != nil {
		return fmt.Errorf("writing the hostPort rules of node %s: %w: %s", node.Name, err, strings.TrimSpace(out.String()))
	}
	return nil
}
