// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
)

func TestNodeEventsAsKubeProxy(t *testing.T) {
	rec := events.NewFakeRecorder(2)
	ev := nodeEventer(rec, "node-1")
	ev(corev1.EventTypeNormal, EventStarting, "")
	ev(corev1.EventTypeWarning, EventFailedToStartProxierHealthcheck, "listen tcp 0.0.0.0:10256: bind: address already in use")
	for _, want := range []string{
		"Normal Starting ",
		"Warning FailedToStartProxierHealthcheck listen tcp 0.0.0.0:10256: bind: address already in use",
	} {
		if got := <-rec.Events; got != want {
			t.Errorf("Event %q, want %q", got, want)
		}
	}
}
