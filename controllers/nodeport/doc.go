// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodeport is the `nodeport` controller: an event-driven audit of
// the nodePorts Services hold, with kube-apiserver's Event reasons where it
// has them:
//
//   - PortAlreadyAllocated: the same nodePort and protocol on two Services
//     (both are named);
//   - PortOutOfRange: a nodePort outside --service-node-port-range;
//   - NodePortInExcludedRange: a nodePort inside a --nodeport-exclude range
//     (asked for explicitly, or given while svcnet was not answering).
//
// Events are de-duplicated (internal/platform/auditevents). It also exports the
// range's usage (svcnet_nodeport_*). Allocation itself happens at admission
// (package admission).
package nodeport
