// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
)

// memReader is a client.Reader over objects held in memory, as the
// informer cache hands them out with UnsafeDisableDeepCopy: benchmarks
// then measure the agent's work, not a fake client's copies.
type memReader struct {
	services []*corev1.Service
	byKey    map[string]*corev1.Service
	slices   map[string][]*discoveryv1.EndpointSlice
}

func (m *memReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if s, ok := obj.(*corev1.Service); ok {
		if found := m.byKey[key.String()]; found != nil {
			*s = *found
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (m *memReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	switch l := list.(type) {
	case *corev1.ServiceList:
		for _, s := range m.services {
			l.Items = append(l.Items, *s)
		}
	case *discoveryv1.EndpointSliceList:
		if o.FieldSelector != nil {
			k, _ := o.FieldSelector.RequiresExactMatch(sliceServiceIndex)
			for _, s := range m.slices[k] {
				l.Items = append(l.Items, *s)
			}
			return nil
		}
		for _, ss := range m.slices {
			for _, s := range ss {
				l.Items = append(l.Items, *s)
			}
		}
	}
	return nil
}

// discardNFT accepts every transaction: the kernel's share is measured
// by the scale benchmark (n), this one the agent's own.
type discardNFT struct{ knftables.Interface }

func (discardNFT) Run(context.Context, *knftables.Transaction) error { return nil }

// newMemReader holds services Services s0, s1, ... in namespace ns, each
// with one slice of 10 endpoints.
func newMemReader(services int) *memReader {
	m := &memReader{byKey: map[string]*corev1.Service{}, slices: map[string][]*discoveryv1.EndpointSlice{}}
	for i := range services {
		s := svc(fmt.Sprintf("s%d", i), netip.AddrFrom4([4]byte{10, 96, byte(i / 250), byte(i%250 + 1)}).String(), nil)
		s.ResourceVersion = "1"
		var ips []string
		for e := range 10 {
			ips = append(ips, fmt.Sprintf("10.%d.%d.%d", 100+i/60000, (i/250)%240, e+1))
		}
		sl := epSlice(s.Name, s.Name+"-1", ips...)
		sl.ResourceVersion = "1"
		m.services = append(m.services, s)
		m.byKey["ns/"+s.Name] = s
		m.slices["ns/"+s.Name] = []*discoveryv1.EndpointSlice{sl}
	}
	return m
}

func benchAgent(b *testing.B, services int) (*Agent, *memReader) {
	b.Helper()
	m := newMemReader(services)
	cfg := testConfig(b, "--cluster-cidr=10.0.0.0/8")
	backend := nftables.NewBackend(corev1.IPv4Protocol, discardNFT{knftables.NewFake(knftables.IPv4Family, nftables.TableName)},
		nftables.Config{ClusterCIDRs: cfg.ClusterCIDRs[corev1.IPv4Protocol]})
	a := newAgent(m, cfg, logr.Discard(), clock.RealClock{}, []dataplane.Backend{backend})
	if err := a.SyncOnce(context.Background()); err != nil {
		b.Fatal(err)
	}
	return a, m
}

// BenchmarkRecheckStep50kServices is one step of the periodic recheck at
// 50,000 Services when nothing changed unseen: the longest a change waits
// behind a recheck. pass-ms is a whole pass, done in steps between syncs.
func BenchmarkRecheckStep50kServices(b *testing.B) {
	a, _ := benchAgent(b, 50000)
	ctx := context.Background()
	var passes int
	start := time.Now()
	for b.Loop() {
		if !a.rechecking {
			a.periodicResync()
		}
		a.recheckStep(ctx)
		if !a.rechecking {
			passes++
		}
	}
	if passes > 0 {
		b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(passes), "pass-ms")
	}
}

// BenchmarkEndpointChange50kServices is one slice's change at 50,000
// Services: the agent's work for (n)'s change, before the kernel's.
func BenchmarkEndpointChange50kServices(b *testing.B) {
	a, m := benchAgent(b, 50000)
	sl := m.slices["ns/s0"][0]
	gen := 1
	for b.Loop() {
		gen++
		next := sl.DeepCopy()
		next.ResourceVersion = fmt.Sprint(gen)
		next.Endpoints[0].Addresses = []string{fmt.Sprintf("10.200.0.%d", gen%250+1)}
		m.slices["ns/s0"] = []*discoveryv1.EndpointSlice{next}
		a.changed(sl, next)
		if err := a.SyncOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
