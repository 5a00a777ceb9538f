// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// hintEvent is one Event about topology-mode Auto, with upstream's type,
// reason and message.
type hintEvent struct {
	eventType, reason, message string
}

// hintTracker remembers which Services have Auto hints, as upstream's
// TopologyCache does, so that TopologyAwareHintsEnabled is said when hints
// appear and TopologyAwareHintsDisabled when the annotation goes. Like
// upstream's, it is in memory: a restarted manager says Enabled again.
type hintTracker struct {
	mu        sync.Mutex
	populated map[types.NamespacedName]bool
}

func newHintTracker() *hintTracker {
	return &hintTracker{populated: map[types.NamespacedName]bool{}}
}

// observe records the outcome of one address family's sync and returns
// the Events upstream would record for it.
func (t *hintTracker) observe(key types.NamespacedName, addressType discoveryv1.AddressType, res hintResult) []hintEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	had := t.populated[key]
	switch {
	case res.auto && res.disabled != "":
		delete(t.populated, key)
		return []hintEvent{{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, withAddressType(res.disabled, addressType)}}
	case res.auto:
		t.populated[key] = true
		if had {
			return nil
		}
		return []hintEvent{{corev1.EventTypeNormal, ReasonTopologyAwareHintsEnabled, withAddressType(msgTopologyAwareHintsEnabled, addressType)}}
	case had:
		delete(t.populated, key)
		return []hintEvent{{corev1.EventTypeWarning, ReasonTopologyAwareHintsDisabled, withAddressType(msgTopologyAwareHintsDisabled, addressType)}}
	}
	return nil
}

// forget drops a deleted Service.
func (t *hintTracker) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.populated, key)
}

// withAddressType appends the address type to a message, as upstream's
// FormatWithAddressType.
func withAddressType(msg string, addressType discoveryv1.AddressType) string {
	return msg + ", addressType: " + string(addressType)
}
