// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package explain answers "why does my Service not answer?": Gather reads
// from the API server what a packet's path to a Service depends on (the
// Service and its addresses, the Pods its selector matches, its
// EndpointSlices, the client's node, svcnet's pools and announcements,
// cluster DNS, the Service's Events), Analyze (pure) follows the path hop
// by hop from a chosen client and names the first hop that breaks with
// what to change, and Text and the Report's JSON render it. `svcnet
// explain` (internal/app/explaincmd) runs it.
package explain
