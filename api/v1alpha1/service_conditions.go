// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package v1alpha1

// ServiceConditionLoadBalancerAnnounced is the condition svcnet's manager
// writes on a LoadBalancer Service from the nodes'
// LoadBalancerNodeAnnouncements: True while a node announces its addresses
// (the message names the node of each address), False when no node may.
const ServiceConditionLoadBalancerAnnounced = "svcnet.io/LoadBalancerAnnounced"
