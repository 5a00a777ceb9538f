// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package server

import (
	"errors"

	"github.com/svcnet-io/svcnet/internal/platform/nodeauth"
)

// ErrPodNotFound is the Runtime's answer for a Pod the node does not run.
var ErrPodNotFound = errors.New("pod not found")

// The subresources of nodes that the kubelet's paths map to; every other
// path is nodes/proxy. A denied fine-grained subresource (pods, healthz)
// falls back to proxy, as the kubelet's fine-grained authorization does.
var kubeletSubresources = []nodeauth.Subresource{
	{Prefix: "/stats", Subresource: "stats"},
	{Prefix: "/metrics", Subresource: "metrics"},
	{Prefix: "/logs", Subresource: "log"},
	{Prefix: "/checkpoint", Subresource: "checkpoint"},
	{Prefix: "/pods", Subresource: "pods", Fallback: true},
	{Prefix: "/healthz", Subresource: "healthz", Fallback: true},
	{Prefix: "/configz", Subresource: "configz", Fallback: true},
}
