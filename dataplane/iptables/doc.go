// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package iptables is the node agent's iptables dataplane (`svcnet agent
// --mode=iptables`), with exactly kube-proxy's chains, names and rules
// (KUBE-SERVICES -> KUBE-SVC-<hash> -> KUBE-SEP-<hash>), so operators'
// knowledge and tooling carry over.
//
// Backend is the agent's dataplane.Backend: SetService renders one
// Service's rules into a Fragment (RenderService, a pure function tested
// with golden files) and keeps it; Sync assembles the kept fragments in
// Service order (Assemble) and hands the Ruleset to a Syncer, which
// applies it through the Interface (the real iptables-restore, or Fake)
// rewriting only the chains that changed since the last successful sync.
// With WithAccounting, each full sync first ensures kube-proxy's nfacct
// counters, and the INVALID drop and localhost NodePort rules count into
// those that exist, as kube-proxy's do (the agent exports them as
// kube-proxy's metrics). Cleanup removes every chain the mode owns
// (`svcnet agent --cleanup`).
// Render, a whole model in one call, serves the golden tests and the
// benchmarks.
package iptables
