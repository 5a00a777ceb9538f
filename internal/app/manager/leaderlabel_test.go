// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package manager_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/platform/repairs"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// Testmanager.LeaderLabel: a starting replica takes the label off its own Pod (a
// restarted former leader's Pod keeps it otherwise), and puts it on once
// it leads.
func TestLeaderLabel(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	ns, err := env.Namespace(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manager-0", Labels: map[string]string{manager.LeaderLabel: "true", "app": "svcnet"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "svcnet"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	labels := func() map[string]string {
		var p corev1.Pod
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		return p.Labels
	}
	t.Setenv("POD_NAMESPACE", ns)
	t.Setenv("POD_NAME", pod.Name)
	l, err := manager.NewLeaderLabel(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if got := labels(); got[manager.LeaderLabel] != "" || got["app"] != "svcnet" {
		t.Fatalf("after start: labels %v, want the leader label gone and the others kept", got)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Start(runCtx) }()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return labels()[manager.LeaderLabel] == "true", nil
	}); err != nil {
		t.Fatalf("once leading: labels %v", labels())
	}

	// Someone takes the label off, or changes it: it comes back.
	for _, value := range []any{nil, "false"} {
		before := repairs.Count("Pod label", repairs.ReasonEdited)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{manager.LeaderLabel: value}}})
		if err := env.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return labels()[manager.LeaderLabel] == "true" && repairs.Count("Pod label", repairs.ReasonEdited) > before, nil
		}); err != nil {
			t.Fatalf("label set to %v by someone else: labels %v, repairs counted %v", value, labels(), repairs.Count("Pod label", repairs.ReasonEdited)-before)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	t.Setenv("POD_NAME", "")
	if l, err := manager.NewLeaderLabel(ctx, env.Config); l != nil || err != nil {
		t.Errorf("outside a Pod: %v, %v; want nothing to do", l, err)
	}
}
