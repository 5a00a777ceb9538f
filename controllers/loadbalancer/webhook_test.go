// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// TestPoolWebhook creates pools through a real API server that calls the
// manager's validating webhook: an overlap with an enabled pool or a
// ServiceCIDR is refused with the other named; a disabled pool passes
// until it is enabled.
func TestPoolWebhook(t *testing.T) {
	env, err := testenv.StartWithManager(testenv.Options{ServiceCIDRs: "10.96.0.0/16"}, controllers.Options{
		Controllers: []string{controllers.LoadBalancerName, controllers.ClusterIPName},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := func(name string, disabled bool, cidr string) *svcnetv1alpha1.LoadBalancerIPPool {
		return &svcnetv1alpha1.LoadBalancerIPPool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{cidr}, Disabled: disabled},
		}
	}
	expectDenied := func(err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want a denial saying %q", err, want)
		}
	}

	if err := env.Client.Create(ctx, pool("serving", false, "192.168.150.0/24")); err != nil {
		t.Fatal(err)
	}
	// Right after: the webhook must see a pool created a moment before,
	// as when both come in one kubectl apply.
	expectDenied(env.Client.Create(ctx, pool("newcomer", false, "192.168.150.128/25")),
		"range 192.168.150.128-192.168.150.255 overlaps range 192.168.150.0-192.168.150.255 of LoadBalancerIPPool serving")
	expectDenied(env.Client.Create(ctx, pool("in-services", false, "10.96.5.0/24")), "overlaps ServiceCIDR kubernetes")

	parked := pool("parked", true, "192.168.150.0/26")
	if err := env.Client.Create(ctx, parked); err != nil {
		t.Fatalf("a disabled pool may overlap: %v", err)
	}
	// The controller writes the pool's status meanwhile: retry conflicts.
	for {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(parked), parked); err != nil {
			t.Fatal(err)
		}
		parked.Spec.Disabled = false
		err := env.Client.Update(ctx, parked)
		if apierrors.IsConflict(err) {
			continue
		}
		expectDenied(err, "of LoadBalancerIPPool serving")
		break
	}

	var list svcnetv1alpha1.LoadBalancerIPPoolList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d pools exist, want serving and parked", len(list.Items))
	}
	if err := env.Client.Create(ctx, pool("elsewhere", false, "192.168.151.0/24")); err != nil {
		t.Errorf("a pool overlapping nothing: %v", err)
	}
}
