// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/repairs"
)

// LeaderLabel marks the Pod of the replica that leads. The webhook Service
// selects it, so admission requests reach the leader alone while every
// replica whose caches are in sync is Ready: a rollout with maxSurge 0 /
// maxUnavailable 1 can then replace the replicas one by one, which it
// cannot while only the leader is Ready.
const LeaderLabel = "svcnet.io/leader"

// leaderValue is LeaderLabel's value on the leader's Pod.
const leaderValue = "true"

// +kubebuilder:rbac:groups="",namespace=svcnet-system,resources=pods,verbs=get;patch;watch

// leaderLabel puts LeaderLabel on the manager's own Pod once it leads. The
// label is removed when the process starts (a restarted container of a
// former leader must not keep it); a leader's process ends with its
// leadership, and its Pod stops being Ready.
type leaderLabel struct {
	c   client.WithWatch
	pod types.NamespacedName
	// labelled is set once this replica's label went on: from then on, a
	// missing label is someone else's change, a repair.
	labelled bool
}

// newLeaderLabel returns the runnable for the Pod named by POD_NAME in the
// manager's namespace, after removing the label; nil outside a Pod.
func newLeaderLabel(ctx context.Context, cfg *rest.Config) (*leaderLabel, error) {
	name := os.Getenv("POD_NAME")
	if name == "" {
		return nil, nil
	}
	repairs.Register()
	c, err := client.NewWithWatch(cfg, client.Options{})
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

// Start labels the Pod, and keeps the label on while this replica leads:
// someone removing or changing it (kubectl label, a tool that applies the
// Deployment's Pod labels) would leave the webhook Service without its
// endpoint. It watches the Pod, and reads it again whenever the watch ends.
func (l *leaderLabel) Start(ctx context.Context) error {
	// The poll ends only when ctx does.
	_ = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := l.keep(ctx); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "Could not keep the leader's Pod labelled; the webhook Service may not reach it", "pod", l.pod, "label", LeaderLabel)
		}
		return false, nil
	})
	return nil
}

// keep puts the label on the Pod if it is not there, then watches the Pod
// and puts it back whenever it goes, until the watch ends.
func (l *leaderLabel) keep(ctx context.Context) error {
	pod := &corev1.Pod{}
	if err := l.c.Get(ctx, l.pod, pod); err != nil {
		return err
	}
	if err := l.ensure(ctx, pod); err != nil {
		return err
	}
	w, err := l.c.Watch(ctx, &corev1.PodList{}, client.InNamespace(l.pod.Namespace),
		client.MatchingFields{"metadata.name": l.pod.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: pod.ResourceVersion}})
	if err != nil {
		return err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Modified:
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if err := l.ensure(ctx, p); err != nil {
					return err
				}
			}
		case watch.Deleted, watch.Error:
			return nil
		}
	}
	return nil
}

// ensure labels pod unless it is labelled already.
func (l *leaderLabel) ensure(ctx context.Context, pod *corev1.Pod) error {
	have, ok := pod.Labels[LeaderLabel]
	if ok && have == leaderValue {
		return nil
	}
	value := leaderValue
	if err := l.set(ctx, &value); err != nil {
		return err
	}
	if l.labelled {
		what := "label " + LeaderLabel + " removed"
		if ok {
			what = "label " + LeaderLabel + "=" + have
		}
		repairs.Report(ctrl.LoggerFrom(ctx), repairs.Change{Kind: "Pod label", Object: klog.KObj(pod), Reason: repairs.ReasonEdited, What: what, By: repairs.LastManager(pod)})
	}
	l.labelled = true
	return nil
}
