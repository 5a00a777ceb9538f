// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package endpointslicemirroring mirrors hand-written Endpoints into
// EndpointSlices, with kube-controller-manager's
// endpointslice-mirroring-controller behaviour: the classic way to put
// something outside the cluster behind a Service (a Service without a
// selector, plus an Endpoints object of the same name) keeps working for
// consumers of EndpointSlices, svcnet's node agent and kube-proxy among
// them.
//
// An Endpoints object is mirrored when its Service exists and has no
// selector, and the Endpoints carries neither the label
// endpointslice.kubernetes.io/skip-mirror=true nor a leader-election
// annotation. Each group of addresses with the same ports and address type
// becomes one slice of at most MaxEndpointsPerSubset endpoints (ready and
// not-ready addresses, ready first); the rest are skipped with a Warning
// Event on the Endpoints, and addresses that are not IPs with a Warning
// Event. Like kube-controller-manager's mirroring controller it never
// writes to the Endpoints themselves (no endpoints.kubernetes.io/over-capacity
// annotation: that is the Endpoints controller's, on the Endpoints it
// manages). Slices carry
// the Endpoints' labels and annotations (except the trigger-time and
// last-applied ones), kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by of kube-controller-manager's
// mirroring controller, which this one replaces, and a controller reference
// to the Endpoints. The slices kube-controller-manager's controller (or an
// earlier svcnet) wrote are adopted in place; slices someone else deletes or
// edits are put back by the next sync.
package endpointslicemirroring
