// Package iptables is the node agent's iptables dataplane. Render turns a
// model.Model into a Ruleset with exactly kube-proxy's chains, names and
// rules (KUBE-SERVICES -> KUBE-SVC-<hash> -> KUBE-SEP-<hash>), so operators'
// knowledge and tooling carry over; it is a pure function, tested with
// golden files. Syncer applies Rulesets through the Interface (the real
// iptables-restore, or Fake in tests), rewriting only the chains that
// changed since the last successful sync. Backend ties them together as
// the agent's dataplane.Backend, and Cleanup removes every chain the mode
// owns (`svcnet agent --cleanup`).
package iptables
