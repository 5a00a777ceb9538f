// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package agent is svcnet's node agent: it watches Services,
// EndpointSlices and its own Node, builds each Service's ports
// (dataplane/model) for every IP family, and hands them to the node's
// dataplane.Backend of that family (iptables or nftables, by --mode), which
// applies them in one transaction per sync. It coalesces bursts of changes
// into one sync, retries failed syncs with backoff, clears the conntrack
// entries of removed UDP endpoints, and serves the health check node ports
// of externalTrafficPolicy: Local Services and its own /healthz, judged
// like kube-proxy's by how long the oldest change not yet applied has
// waited. Options are completed once into a Config; time comes from an
// injected clock, so tests step it instead of sleeping.
package agent
