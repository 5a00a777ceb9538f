// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodesim is the kubelets (and the scheduler) of `svcnet up`'s
// simulated nodes: as far as the API can tell, each node is a kubelet.
//
// The parts, as a kubelet's:
//
//   - this package: the Node objects and their heartbeats (nodes.go), the
//     scheduler that binds Pods to the node with the fewest (scheduler.go),
//     the pod workers that start, report and stop each Pod (pods.go), the
//     Pod network: a namespace per Pod wired to its node (podnet.go, see
//     localcluster/netlab) and hostPorts (hostport.go), and the
//     wiring of each node's kubelet API (kubelet.go);
//   - server: the kubelet's HTTPS API (exec, attach, port-forward,
//     containerLogs, /pods, /healthz, /metrics) with its authentication
//     and authorization;
//   - kuberuntime: what the kubelet does for a Pod's containers: files and
//     volumes, environment, security, init containers, restarts, probes,
//     hooks, statuses;
//   - container: the container runtime: a process in namespaces and a root
//     of its own, exec, attach, CRI logs;
//   - images: the images run for real, built by `make node-images`;
//     containers of other images are stand-ins that answer on their ports
//     with the Pod's name.
//
// The simulator stays out of svcnet's controllers and agent: it only
// writes what kubelets write (Nodes, Leases, Pod status, bindings, Events).
package nodesim
