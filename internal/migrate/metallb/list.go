// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"context"
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kinds are the kinds read from the cluster, each in the versions
// MetalLB v0.16 serves, preferred first. BFDProfiles are read for the
// peers that name them; Communities for the names they give community
// values.
var kinds = [][]schema.GroupVersionKind{
	{{Group: Group, Version: "v1beta1", Kind: "IPAddressPool"}},
	{{Group: Group, Version: "v1beta1", Kind: "L2Advertisement"}},
	{{Group: Group, Version: "v1beta1", Kind: "BGPAdvertisement"}},
	{{Group: Group, Version: "v1beta2", Kind: "BGPPeer"}, {Group: Group, Version: "v1beta1", Kind: "BGPPeer"}},
	{{Group: Group, Version: "v1beta1", Kind: "BFDProfile"}},
	{{Group: Group, Version: "v1beta1", Kind: "Community"}},
}

// List lists MetalLB's objects in every namespace; a kind the
// cluster does not serve has none.
func List(ctx context.Context, c client.Reader) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, versions := range kinds {
		for _, gvk := range versions {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			err := c.List(ctx, list)
			if apimeta.IsNoMatchError(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("listing MetalLB's %ss: %w", gvk.Kind, err)
			}
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			break
		}
	}
	return out, nil
}
