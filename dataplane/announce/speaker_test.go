// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// kindLaterCache is a cache whose API server serves the watched kind
// only after failures: the errors the speaker meets when a chart applies
// the CRDs and the DaemonSet together.
type kindLaterCache struct {
	cache.Cache
	failures []error
	calls    int
}

type fakeInformer struct{ cache.Informer }

func (c *kindLaterCache) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	c.calls++
	if c.calls <= len(c.failures) {
		return nil, c.failures[c.calls-1]
	}
	return fakeInformer{}, nil
}

func TestInformerWaitsForTheKind(t *testing.T) {
	defer func(d time.Duration) { kindPollInterval = d }(kindPollInterval)
	kindPollInterval = time.Millisecond
	gk := schema.GroupKind{Group: svcnetv1alpha1.GroupVersion.Group, Kind: "LoadBalancerAnnouncement"}
	c := &kindLaterCache{failures: []error{
		&apimeta.NoKindMatchError{GroupKind: gk, SearchedVersions: []string{"v1alpha1"}},
		errors.New(`failed to get API group resources: unable to retrieve the complete list of server APIs: networking.svcnet.io/v1alpha1: the server could not find the requested resource`),
	}}
	s := &Speaker{log: logr.Discard()}
	inf, err := s.informer(context.Background(), c, &svcnetv1alpha1.LoadBalancerAnnouncement{})
	if err != nil || inf == nil {
		t.Fatalf("informer: %v, %v; want the informer once the kind is served", inf, err)
	}
	if c.calls != 3 {
		t.Errorf("asked %d times, want 3 (two failures, then the informer)", c.calls)
	}
}

func TestInformerStopsWithItsContext(t *testing.T) {
	defer func(d time.Duration) { kindPollInterval = d }(kindPollInterval)
	kindPollInterval = time.Millisecond
	gk := schema.GroupKind{Group: svcnetv1alpha1.GroupVersion.Group, Kind: "LoadBalancerIPPool"}
	failures := make([]error, 1000)
	for i := range failures {
		failures[i] = &apimeta.NoKindMatchError{GroupKind: gk}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	s := &Speaker{log: logr.Discard()}
	if _, err := s.informer(ctx, &kindLaterCache{failures: failures}, &svcnetv1alpha1.LoadBalancerIPPool{}); err == nil {
		t.Fatal("informer returned without the kind and with its context ended, and no error")
	}
}
