// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package metallb converts MetalLB's configuration into svcnet's, for
// `svcnet migrate metallb` (docs/operations.md, "Coming from MetalLB"):
// IPAddressPools become LoadBalancerIPPools of the same name, and
// L2Advertisements, BGPAdvertisements and the BGPPeers they use become
// LoadBalancerAnnouncements. Whatever has no svcnet counterpart is a
// Warning that names the MetalLB object and field.
//
// MetalLB's objects are read as unstructured (group metallb.io), so svcnet
// does not link MetalLB's module. The package is pure: objects in, objects
// and warnings out; it reads and writes no cluster.
//
// svcnet selects pools by label, where MetalLB's advertisements name them,
// so every converted pool carries the label PoolLabel with its name, and an
// advertisement's ipAddressPools become a poolSelector on that label.
package metallb
