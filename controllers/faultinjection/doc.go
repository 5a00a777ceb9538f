// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package faultinjection holds a test suite, and no code of svcnet's: every
// svcnet controller runs against a real API server (envtest) while Services
// and Pods churn and a seeded disruptor deletes, edits and replaces the
// objects svcnet owns (EndpointSlices of both slice controllers, IPAddresses
// of ClusterIPs and LoadBalancer IPs, status.loadBalancer.ingress,
// LoadBalancerIPPool and ServiceCIDRBinding status). When the churn stops,
// the cluster must converge within a bound to what upstream's controllers
// would hold for the same Services and Pods (the EndpointSlices are compared
// with those kube-controller-manager's reconciler, k8s.io/endpointslice,
// writes), with no duplicate address, no orphan and no Service without
// slices, while the objects that are not svcnet's (slices of other
// managers, IPAddresses of other API groups, hand-written Endpoints) are
// never written.
//
// The suite runs in `make test` for a few seconds of churn;
// SVCNET_FAULT_DURATION=5m runs it longer, and SVCNET_FAULT_SEED replays
// the same sequence of actions (which generated object an action hits may
// still differ, as the API server names them).
package faultinjection
