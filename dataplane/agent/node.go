// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TaintToBeDeleted is the taint the cluster autoscaler puts on a Node it
// is about to remove (KEP-3836): /healthz fails on such a node so that
// load balancers drain it first.
const TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"

// NodeEligible tells whether this node should receive load balancer
// traffic, as kube-proxy's health server judges it: its Node exists, is
// not being deleted and has no ToBeDeletedByClusterAutoscaler taint. A
// Node that cannot be read is not eligible.
func (a *Agent) NodeEligible(ctx context.Context) bool {
	var n corev1.Node
	if err := a.reader.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, &n); err != nil {
		if !apierrors.IsNotFound(err) {
			a.log.V(2).Info("Reading the Node for /healthz failed", "err", err.Error())
		}
		return false
	}
	return nodeEligible(&n)
}

func nodeEligible(n *corev1.Node) bool {
	if !n.DeletionTimestamp.IsZero() {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintToBeDeleted {
			return false
		}
	}
	return true
}
