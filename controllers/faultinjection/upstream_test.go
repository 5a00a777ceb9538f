// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package faultinjection_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	endpointslicerec "k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/controllers/endpointslice"
)

// upstreamSlices returns the slices kube-controller-manager's EndpointSlice
// controller writes for svc and the Pods its selector matches, from none:
// its own reconciler (k8s.io/endpointslice, the library the controller is
// built on) against a fake API.
func upstreamSlices(svc *corev1.Service, pods []*corev1.Pod, nodes []corev1.Node) ([]discoveryv1.EndpointSlice, error) {
	cs := fake.NewClientset()
	// The fake API does not generate names.
	var n atomic.Int64
	cs.PrependReactor("create", "endpointslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if s, ok := action.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice); ok && s.Name == "" {
			s.Name = fmt.Sprintf("%s%d", s.GenerateName, n.Add(1))
		}
		return false, nil, nil
	})
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range nodes {
		if err := indexer.Add(&nodes[i]); err != nil {
			return nil, err
		}
	}
	r := endpointslicerec.NewReconciler(cs, corelisters.NewNodeLister(indexer), endpointslice.DefaultMaxEndpointsPerSlice,
		endpointsliceutil.NewEndpointSliceTracker(), nil, record.NewFakeRecorder(100), endpointslice.ManagedBy)
	if err := r.Reconcile(klog.Background(), svc, pods, nil, time.Now()); err != nil {
		return nil, err
	}
	list, err := cs.DiscoveryV1().EndpointSlices(svc.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// published is what a set of slices says of one address: the endpoint and
// the ports it is reached on.
type published struct {
	Endpoint discoveryv1.Endpoint
	Ports    []discoveryv1.EndpointPort
}

// publishedBy indexes the endpoints of slices by address type and address,
// whatever the packing, and lists the addresses published twice.
func publishedBy(list []discoveryv1.EndpointSlice) (map[string]published, []string) {
	out := map[string]published{}
	var twice []string
	for _, s := range list {
		ports := slices.Clone(s.Ports)
		slices.SortFunc(ports, func(a, b discoveryv1.EndpointPort) int {
			return cmp.Compare(ptr.Deref(a.Name, ""), ptr.Deref(b.Name, ""))
		})
		for _, ep := range s.Endpoints {
			key := string(s.AddressType) + " " + strings.Join(ep.Addresses, ",")
			if _, dup := out[key]; dup {
				twice = append(twice, key)
			}
			out[key] = published{Endpoint: ep, Ports: ports}
		}
	}
	return out, twice
}
