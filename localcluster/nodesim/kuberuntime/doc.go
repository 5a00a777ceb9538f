// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package kuberuntime is the node simulator's kubelet for one Pod's
// containers: it writes the files a kubelet gives a Pod (volumes,
// resolv.conf, hosts), builds each container's command, environment and
// security from its spec and its image, runs init containers in order and
// then the others, restarts them per restartPolicy with the kubelet's
// back-off, runs their probes (HTTP, TCP, exec, gRPC) and lifecycle hooks,
// stops them with their grace period, and reports their statuses. Images
// the simulator does not run for real (nodesim/images) are stand-ins:
// their containers are reported running, Ready after their readiness
// probe's initial delay, while the simulator serves their ports; their
// logs say so. Processes are run by nodesim/container.
package kuberuntime
