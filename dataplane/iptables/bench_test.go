// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane/model"
)

// cluster builds n Services with 10 endpoints each.
func benchCluster(n int) ([]*corev1.Service, map[types.NamespacedName][]*discoveryv1.EndpointSlice) {
	var svcs []*corev1.Service
	bySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for i := range n {
		s := web(nil)
		s.Name = fmt.Sprintf("svc%d", i)
		s.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		svcs = append(svcs, s)
		var eps []ep
		for e := range 10 {
			eps = append(eps, ready(fmt.Sprintf("10.%d.%d.%d", 100+i/250, i%250, e+1), node))
		}
		bySvc[types.NamespacedName{Namespace: "ns", Name: s.Name}] = []*discoveryv1.EndpointSlice{slice(s.Name, "ns", discoveryv1.AddressTypeIPv4, 8080, eps...)}
	}
	return svcs, bySvc
}

// BenchmarkRender10kServices measures model building and rendering of
// 10,000 Services x 10 endpoints, the work of every sync.
func BenchmarkRender10kServices(b *testing.B) {
	svcs, bySvc := benchCluster(10000)
	b.ReportAllocs()
	for b.Loop() {
		m := model.Build(corev1.IPv4Protocol, model.Node{Name: node}, svcs, bySvc, model.Options{})
		Render(m, Config{})
	}
}

// BenchmarkPartialSync10kServices measures a sync after one endpoint
// changed at 10,000 Services, against the in-memory fake.
func BenchmarkPartialSync10kServices(b *testing.B) {
	svcs, bySvc := benchCluster(10000)
	s := NewSyncer(discard{})
	ctx := context.Background()
	render := func() *Ruleset {
		return Render(model.Build(corev1.IPv4Protocol, model.Node{Name: node}, svcs, bySvc, model.Options{}), Config{})
	}
	if _, err := s.Sync(ctx, render()); err != nil {
		b.Fatal(err)
	}
	flip := false
	b.ReportAllocs()
	for b.Loop() {
		flip = !flip
		flipEndpoint(bySvc[types.NamespacedName{Namespace: "ns", Name: "svc0"}][0], flip)
		res, err := s.Sync(ctx, render())
		if err != nil || res.Full || res.Chains == 0 {
			b.Fatalf("sync %+v: %v", res, err)
		}
	}
}

// BenchmarkIncrementalSync10kServices measures what the agent does when
// one endpoint changes at 10,000 Services: re-render that Service only,
// assemble the ruleset from the kept fragments, and sync the difference.
func BenchmarkIncrementalSync10kServices(b *testing.B) {
	svcs, bySvc := benchCluster(10000)
	nodeInfo := model.Node{Name: node}
	frags := make([]*Fragment, len(svcs))
	for i, svc := range svcs {
		frags[i] = RenderService(model.BuildService(corev1.IPv4Protocol, nodeInfo, svc, bySvc[types.NamespacedName{Namespace: "ns", Name: svc.Name}], model.Options{}), Config{})
	}
	s := NewSyncer(discard{})
	ctx := context.Background()
	if _, err := s.Sync(ctx, Assemble(frags, Config{})); err != nil {
		b.Fatal(err)
	}
	flip := false
	b.ReportAllocs()
	for b.Loop() {
		flip = !flip
		flipEndpoint(bySvc[types.NamespacedName{Namespace: "ns", Name: "svc0"}][0], flip)
		frags[0] = RenderService(model.BuildService(corev1.IPv4Protocol, nodeInfo, svcs[0], bySvc[types.NamespacedName{Namespace: "ns", Name: "svc0"}], model.Options{}), Config{})
		res, err := s.Sync(ctx, Assemble(frags, Config{}))
		if err != nil || res.Full || res.Chains == 0 {
			b.Fatalf("sync %+v: %v", res, err)
		}
	}
}

// discard is an Interface that accepts every restore, so that benchmarks
// measure svcnet's work and not the Fake's checks or the kernel's.
type discard struct{}

func (discard) Restore(context.Context, []byte) error        { return nil }
func (discard) Save(context.Context, string) ([]byte, error) { return nil, nil }
func (discard) ChainRules(context.Context, string, string) ([]string, bool, error) {
	return nil, false, nil
}

// flipEndpoint moves a slice's first endpoint between two addresses.
func flipEndpoint(s *discoveryv1.EndpointSlice, second bool) {
	ip := "10.200.0.1"
	if second {
		ip = "10.200.0.2"
	}
	s.Endpoints[0].Addresses = []string{ip}
}
