// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// How the control plane, on this machine's loopback, and the simulated
// network reach each other. Pods reach the API server at the fabric's
// address, where a forwarder leads to loopback. The API server's traffic
// into the cluster (the proxy subresources to Pods and Services, the
// kubelets' API for exec and logs, webhooks behind Services) goes through
// an HTTP CONNECT proxy on a unix socket whose connections start in the
// control-plane namespace on the fabric, as a konnectivity server carries
// it on a real cluster.

// egressSocket is the unix socket of the proxy that carries
// kube-apiserver's cluster traffic into the simulated network.
func (s *session) egressSocket() string { return filepath.Join(s.dataDir, "egress.sock") }

// writeEgressSelector writes kube-apiserver's EgressSelectorConfiguration:
// its "cluster" traffic goes through an HTTP CONNECT proxy on a unix
// socket, as with a konnectivity server, here the fabric's control-plane
// namespace.
func (s *session) writeEgressSelector() (string, error) {
	socket := s.egressSocket()
	if len(socket) >= 104 {
		return "", fmt.Errorf("--data-dir %s is too long for the API server's egress socket %s (unix sockets take 103 bytes)", s.dataDir, socket)
	}
	path := filepath.Join(s.dataDir, "egress-selector.yaml")
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, socket)
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// startEgress gives the control plane its place on the fabric, routed to
// the Pods and Services through the nodes, and serves the egress proxy.
func (cl *cluster) startEgress(c Config, socket string) error {
	// kube-apiserver's cluster traffic (webhooks behind a Service) leaves
	// from controlPlaneHost on the fabric.
	ns, err := cl.addOutside(c, "control-plane", controlPlaneHost)
	if err != nil {
		return err
	}
	if err := cl.routeOutside(ns, c.routedServiceCIDRs()); err != nil {
		return err
	}
	return cl.lab.ServeConnect(ns, socket)
}

// exposeAPIServer makes the kubernetes Service lead to the API server from
// the Pods, as on a real cluster: a forwarder on the fabric's own address
// (the API server's advertised address, which its endpoint reconciler
// writes into the Service's Endpoints and EndpointSlice) to the API server
// on this namespace's loopback, and the Pods' ranges routed back from the
// fabric.
func (cl *cluster) exposeAPIServer(c Config) error {
	listen := net.JoinHostPort(c.apiServerAddr().String(), strconv.Itoa(c.APIServerPort))
	if err := cl.lab.Forward(cl.lab.Fabric(), listen, net.JoinHostPort("127.0.0.1", strconv.Itoa(c.APIServerPort))); err != nil {
		return fmt.Errorf("forwarding the API server to the fabric: %w", err)
	}
	return cl.routePods(cl.lab.Fabric())
}
