// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package addons

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fieldOwner is the field manager of what `svcnet up` applies.
const fieldOwner = "svcnet-up"

// Apply server-side applies objs, as `kubectl apply --server-side` does,
// taking over fields an earlier run set.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil { //nolint:staticcheck // Apply with unstructured objects
			return fmt.Errorf("applying %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	return nil
}
