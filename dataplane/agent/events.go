// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// kube-proxy's Events on its Node, with its reasons and action: it
// starts, and its health or metrics address cannot be listened on (the
// agent retries; kube-proxy too).
const (
	EventStarting                        = "Starting"
	EventFailedToStartProxierHealthcheck = "FailedToStartProxierHealthcheck"
	EventFailedToStartMetricServer       = "FailedToStartMetricServer"
	// EventFailedToStartAPIServer is svcnet's own, for its API's address
	// (--api-bind-address).
	EventFailedToStartAPIServer = "FailedToStartAPIServer"

	nodeEventAction = "StartKubeProxy"
)

// nodeEventer records Events on the agent's Node as kube-proxy does: a
// reference by name whose UID is the name, so that `kubectl describe
// node` lists them without the agent reading its Node first.
func nodeEventer(rec events.EventRecorder, node string) func(eventType, reason, note string) {
	ref := &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
	return func(eventType, reason, note string) {
		rec.Eventf(ref, nil, eventType, reason, nodeEventAction, "%s", note)
	}
}
