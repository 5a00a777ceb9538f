// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package loadbalancer gives LoadBalancer Services addresses from
// LoadBalancerIPPools on clusters without a cloud load balancer. An address
// is committed by creating the networking.k8s.io/v1 IPAddress object named by
// it (kube-apiserver accepts each name once, so two Services never get one
// address), with the Service as parentRef, and only then written to
// status.loadBalancer.ingress, where svcnet's agent (or kube-proxy) serves it.
package loadbalancer
