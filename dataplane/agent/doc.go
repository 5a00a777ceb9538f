// Package agent is svcnet's node agent: it watches Services,
// EndpointSlices and its own Node, builds the node's model
// (dataplane/model) for each IP family, renders it with the iptables
// backend and applies it, coalescing bursts of changes into one sync and
// retrying failed syncs with backoff. It also serves the health check
// node ports of externalTrafficPolicy: Local Services and its own /healthz.
package agent
