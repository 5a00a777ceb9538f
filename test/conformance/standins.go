// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// standInReason is the Event reason with which svcnet up's node simulator
// says a container runs a stand-in server instead of its image's program
// (an image it does not have). A test whose Pods ran stand-ins did not
// exercise what it checks: with agnhost's test-webserver a stand-in, the
// DNS tests read their "results" from a server that answers every path.
const standInReason = "StandInImage"

var standInImageRE = regexp.MustCompile(`image "([^"]+)"`)

// faithfulStandIns are images whose stand-in does all that the v1.37.1
// conformance tests ask of them, so their stand-ins do not void a pass:
// pause only has to run until stopped (Service endpoints latency), and
// nginx only has to run so that its Pods get addresses (the Endpoints
// tests); no test sends them traffic.
var faithfulStandIns = []string{
	"registry.k8s.io/pause",
	"registry.k8s.io/e2e-test-images/nginx",
}

// faithful tells whether image's stand-in is as good as its program here.
func faithful(image string) bool {
	repo, _, _ := strings.Cut(image, ":")
	return slices.Contains(faithfulStandIns, repo)
}

// standIns records, per namespace, the images that ran as stand-ins. The
// tests delete their namespaces (and Events) as they end, so it watches
// during the run.
type standIns struct {
	mu     sync.Mutex
	images map[string][]string
}

// watchStandIns watches the cluster's stand-in Events until ctx ends.
// Failing to watch is not fatal: the summary then says nothing of stand-ins.
func watchStandIns(ctx context.Context, kubeconfig string) (*standIns, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := &standIns{images: map[string][]string{}}
	selector := fields.OneTermEqualSelector("reason", standInReason).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return cs.CoreV1().Events(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Event{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ev, ok := obj.(*corev1.Event); ok {
				s.add(ev)
			}
		},
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(ctx)
	return s, nil
}

func (s *standIns) add(ev *corev1.Event) {
	image := "an unknown image"
	if m := standInImageRE.FindStringSubmatch(ev.Message); m != nil {
		image = m[1]
	}
	if faithful(image) {
		return
	}
	ns := ev.InvolvedObject.Namespace
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.images[ns], image) {
		s.images[ns] = append(s.images[ns], image)
		slices.Sort(s.images[ns])
	}
}

// in returns the images that ran as stand-ins in the namespaces.
func (s *standIns) in(namespaces []string) []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ns := range namespaces {
		for _, img := range s.images[ns] {
			if !slices.Contains(out, img) {
				out = append(out, img)
			}
		}
	}
	slices.Sort(out)
	return out
}
