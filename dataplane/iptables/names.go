// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Fixed chain names, as kube-proxy's.
const (
	ChainServices         = "KUBE-SERVICES"
	ChainNodePorts        = "KUBE-NODEPORTS"
	ChainExternalServices = "KUBE-EXTERNAL-SERVICES"
	ChainForward          = "KUBE-FORWARD"
	ChainProxyFirewall    = "KUBE-PROXY-FIREWALL"
	ChainPostrouting      = "KUBE-POSTROUTING"
	ChainMarkMasq         = "KUBE-MARK-MASQ"

	// MasqueradeMark is kube-proxy's default --iptables-masquerade-bit 14.
	MasqueradeMark = "0x4000"
)

// portProtoHash is kube-proxy's: the first 16 characters of the base32 of
// sha256(servicePortName + protocol), so chain names match kube-proxy's on
// the same cluster.
func portProtoHash(servicePortName string, protocol corev1.Protocol) string {
	sum := sha256.Sum256([]byte(servicePortName + strings.ToLower(string(protocol))))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

func svcChain(name string, proto corev1.Protocol) string {
	return "KUBE-SVC-" + portProtoHash(name, proto)
}
func svlChain(name string, proto corev1.Protocol) string {
	return "KUBE-SVL-" + portProtoHash(name, proto)
}
func extChain(name string, proto corev1.Protocol) string {
	return "KUBE-EXT-" + portProtoHash(name, proto)
}
func fwChain(name string, proto corev1.Protocol) string {
	return "KUBE-FW-" + portProtoHash(name, proto)
}

// sepChain names an endpoint's chain from the service port and "ip:port".
func sepChain(name string, proto corev1.Protocol, endpoint string) string {
	sum := sha256.Sum256([]byte(name + strings.ToLower(string(proto)) + endpoint))
	return "KUBE-SEP-" + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// isServiceChain tells whether a chain is one of the per-service chains
// this package owns (and so may delete when no longer rendered).
func isServiceChain(name string) bool {
	for _, p := range []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ServiceChain is the KUBE-SVC- chain of a Service's port (portName empty
// for an unnamed port), as kube-proxy names it: operators and tools look
// up a Service's rules with it.
func ServiceChain(namespace, service, portName string, proto corev1.Protocol) string {
	name := namespace + "/" + service
	if portName != "" {
		name += ":" + portName
	}
	return svcChain(name, proto)
}

// EndpointChain is the KUBE-SEP- chain of one endpoint ("ip:port") of a
// Service's port, as kube-proxy names it.
func EndpointChain(namespace, service, portName string, proto corev1.Protocol, endpoint string) string {
	name := namespace + "/" + service
	if portName != "" {
		name += ":" + portName
	}
	return sepChain(name, proto, endpoint)
}

// EndpointJumps counts the rules of chain that jump to a KUBE-SEP- chain in
// the output of `iptables-save -t nat`: the endpoints a node's rules give a
// service port. It is -1 when the chain is not there.
func EndpointJumps(natSave []byte, chain string) int {
	declared := []byte(":" + chain + " ")
	rule := "-A " + chain + " "
	n := -1
	for _, line := range strings.Split(string(natSave), "\n") {
		switch {
		case strings.HasPrefix(line, string(declared)):
			n = max(n, 0)
		case strings.HasPrefix(line, rule):
			n = max(n, 0)
			if strings.Contains(line, "-j KUBE-SEP-") {
				n++
			}
		}
	}
	return n
}
