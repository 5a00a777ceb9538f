// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/test/testenv"
)

const apiTimeout = 30 * time.Second

// TestConvertedObjectsPassCRDValidation creates what every conversion case
// makes in a real API server with svcnet's CRDs: their schemas and CEL
// rules must accept it all.
func TestConvertedObjectsPassCRDValidation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver")
	}
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
	defer cancel()

	// The API server does refuse what the CRDs forbid, so that the
	// creations below prove something.
	invalid := &svcnetv1alpha1.LoadBalancerAnnouncement{
		ObjectMeta: metav1.ObjectMeta{Name: "bgp-without-peers"},
		Spec:       svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP},
	}
	if err := env.Client.Create(ctx, invalid); !apierrors.IsInvalid(err) {
		t.Fatalf("creating an announcement in mode BGP without bgp: error %v, want Invalid", err)
	}

	for name, tc := range convertCases {
		t.Run(name, func(t *testing.T) {
			res := convert(t, tc.metallb)
			var objs []client.Object
			for i := range res.Pools {
				objs = append(objs, &res.Pools[i])
			}
			for i := range res.Announcements {
				objs = append(objs, &res.Announcements[i])
			}
			for _, o := range objs {
				o := o.DeepCopyObject().(client.Object)
				if err := env.Client.Create(ctx, o); err != nil {
					t.Errorf("creating %s %s: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
					continue
				}
				// The cases reuse names; each starts from an empty cluster.
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
			}
		})
	}
}
