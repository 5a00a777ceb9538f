// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/internal/nodeview"
)

// TestServiceViewFollowsTheRules checks what the API says of a Service:
// its ports and endpoints once synced, a change the loop has not taken
// yet, a policy that leaves the node nothing, and a loop that does not
// answer.
func TestServiceViewFollowsTheRules(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newFakeClient()
	must(t, c.Create(ctx, svc("web", "10.96.0.10", nil)))
	must(t, c.Create(ctx, epSlice("web", "web-1", "10.244.1.2", "10.244.1.3")))
	must(t, c.Create(ctx, svc("local", "10.96.0.11", func(s *corev1.Service) {
		s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
	})))
	other := epSlice("local", "local-1", "10.244.2.2")
	other.Endpoints[0].NodeName = ptr.To("node-b")
	must(t, c.Create(ctx, other))
	a, _ := testAgent(t, c)
	web := types.NamespacedName{Namespace: "ns", Name: "web"}

	t.Run("no answer while the loop does not run", func(t *testing.T) {
		short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
		defer stop()
		if _, err := a.ServiceView(short, web); !errors.Is(err, errLoopBusy) {
			t.Fatalf("view without a loop: %v, want %v", err, errLoopBusy)
		}
	})

	done := make(chan error, 1)
	go func() { done <- a.Loop(ctx) }()
	waitFor(ctx, t, "the first sync", func() bool { return a.Health().Ready })

	t.Run("synced: ports and endpoints, up to date", func(t *testing.T) {
		v, err := a.ServiceView(ctx, web)
		must(t, err)
		if !v.Exists || !v.Rendered || !v.UpToDate || !v.Sync.Healthy || v.Node != "node-a" {
			t.Fatalf("view %+v: want an existing, rendered, up-to-date Service on a healthy node-a", v)
		}
		if len(v.Ports) != 1 {
			t.Fatalf("ports %+v, want one", v.Ports)
		}
		p := v.Ports[0]
		want := []nodeview.Endpoint{{Address: "10.244.1.2:8080", Local: true, Ready: true}, {Address: "10.244.1.3:8080", Local: true, Ready: true}}
		if p.ClusterIP != "10.96.0.10" || p.Port != 80 || p.Family != "IPv4" || !slices.Equal(p.Internal, want) {
			t.Fatalf("port %+v, want 10.96.0.10:80 IPv4 to %v", p, want)
		}
	})

	t.Run("internalTrafficPolicy Local with no local endpoint: nothing to send to", func(t *testing.T) {
		v, err := a.ServiceView(ctx, types.NamespacedName{Namespace: "ns", Name: "local"})
		must(t, err)
		if len(v.Ports) != 1 || len(v.Ports[0].Internal) != 0 || !v.Ports[0].InternalPolicyLocal || !v.Ports[0].HasEndpoints {
			t.Fatalf("ports %+v: want Local with no endpoint here, some elsewhere", v.Ports)
		}
	})

	t.Run("a change the rules do not have yet", func(t *testing.T) {
		// Written behind the agent's back: no notification, no sync.
		var s corev1.Service
		must(t, c.Get(ctx, web, &s))
		s.Spec.Ports[0].Port = 81
		must(t, c.Update(ctx, &s))
		v, err := a.ServiceView(ctx, web)
		must(t, err)
		if v.UpToDate || v.RenderedFrom == v.CacheHolds {
			t.Fatalf("view %+v: want rendered from older objects than the cache holds", v)
		}
		a.changed(nil, &s)
		waitFor(ctx, t, "the change rendered", func() bool {
			v, err := a.ServiceView(ctx, web)
			return err == nil && v.UpToDate
		})
	})

	t.Run("a Service that does not exist", func(t *testing.T) {
		v, err := a.ServiceView(ctx, types.NamespacedName{Namespace: "ns", Name: "nope"})
		must(t, err)
		if v.Exists || v.Rendered || !v.UpToDate {
			t.Fatalf("view %+v: want neither in the cache nor in the rules", v)
		}
	})
	cancel()
	must(t, <-done)
}
