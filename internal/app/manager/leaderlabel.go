package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaderLabel marks the Pod of the replica that leads. The webhook Service
// selects it, so admission requests reach the leader alone while every
// replica whose caches are in sync is Ready: a rollout with maxSurge 0 /
// maxUnavailable 1 can then replace the replicas one by one, which it
// cannot while only the leader is Ready.
const LeaderLabel = "svcnet.io/leader"

// +kubebuilder:rbac:groups="",namespace=svcnet-system,resources=pods,verbs=get;patch

// leaderLabel puts LeaderLabel on the manager's own Pod once it leads. The
// label is removed when the process starts (a restarted container of a
// former leader must not keep it); a leader's process ends with its
// leadership, and its Pod stops being Ready.
type leaderLabel struct {
	c   client.Client
	pod types.NamespacedName
}

// newLeaderLabel returns the runnable for the Pod named by POD_NAME in the
// manager's namespace, after removing the label; nil outside a Pod.
func newLeaderLabel(ctx context.Context, cfg *rest.Config) (*leaderLabel, error) {
	name := os.Getenv("POD_NAME")
	if name == "" {
		return nil, nil
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	l := &leaderLabel{c: c, pod: types.NamespacedName{Namespace: ownNamespace(), Name: name}}
	if err := l.set(ctx, nil); err != nil {
		return nil, fmt.Errorf("removing the %s label from Pod %s (POD_NAME): %w", LeaderLabel, l.pod, err)
	}
	return l, nil
}

// set patches the label to value, or removes it when value is nil.
func (l *leaderLabel) set(ctx context.Context, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LeaderLabel: value}}})
	if err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.pod.Namespace, Name: l.pod.Name}}
	return l.c.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch))
}

// NeedLeaderElection: the label goes on once this replica leads.
func (l *leaderLabel) NeedLeaderElection() bool { return true }

// Start labels the Pod, retrying until it succeeds or ctx ends, and holds
// until ctx ends.
func (l *leaderLabel) Start(ctx context.Context) error {
	leader := "true"
	// The poll ends only once the label is on or ctx ended.
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := l.set(ctx, &leader); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Could not label the leader's Pod; the webhook Service does not reach it yet", "pod", l.pod, "label", LeaderLabel)
			return false, nil
		}
		return true, nil
	})
	<-ctx.Done()
	return nil
}
