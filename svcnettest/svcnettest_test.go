// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package svcnettest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/svcnettest"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestZeroOptions runs the package as a downstream suite would, with the
// zero Options: the EndpointSlice controller publishes a Service's ready
// Pod.
func TestZeroOptions(t *testing.T) {
	bins, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: bins}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	svcnet, err := svcnettest.Start(ctx, cfg, svcnettest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := svcnet.Manager.GetClient()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.5", PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "web"}); err != nil {
			return false, err
		}
		return len(slices.Items) == 1 && len(slices.Items[0].Endpoints) == 1 && slices.Items[0].Endpoints[0].Addresses[0] == "10.244.0.5", nil
	})
	if err != nil {
		t.Fatalf("no EndpointSlice with the Pod: %v", err)
	}
	if err := svcnet.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The webhook controllers without a webhook server are refused with a
// message saying what to pass.
func TestWebhookControllersNeedWebhook(t *testing.T) {
	_, err := svcnettest.Start(context.Background(), nil, svcnettest.Options{Controllers: controllers.Options{Controllers: []string{controllers.ClusterIPName}}})
	if err == nil || !strings.Contains(err.Error(), "Options.Webhook") {
		t.Errorf("got %v, want an error naming Options.Webhook", err)
	}
}
