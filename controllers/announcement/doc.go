// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package announcement is the manager's controller of
// LoadBalancerAnnouncements: it judges every announcement against the
// others, the pools and the nodes (internal/announcementpolicy.Judge: malformed,
// overlapping) and writes the Accepted condition the agents act on. It
// takes no part in choosing which node announces an address: the agents do
// that among themselves, so a failover never waits for the manager.
package announcement
