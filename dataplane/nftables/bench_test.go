// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// discard is a knftables interface that accepts every transaction, so that
// benchmarks measure svcnet's work and not the Fake's or the kernel's.
type discard struct{ knftables.Interface }

func (discard) Run(context.Context, *knftables.Transaction) error { return nil }

// benchPorts is the port of Service i with 10 endpoints, shifted by gen.
func benchPorts(i, gen int) []*model.ServicePort {
	eps := make([]string, 10)
	for e := range eps {
		eps[e] = fmt.Sprintf("10.%d.%d.%d", 100+i/250, i%250, (e+gen)%250+1)
	}
	return []*model.ServicePort{port(fmt.Sprintf("svc%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), eps...)}
}

func benchBackend(b *testing.B, services int) *Backend {
	b.Helper()
	be := NewBackend(corev1.IPv4Protocol, discard{knftables.NewFake(knftables.IPv4Family, TableName)}, Config{})
	for i := range services {
		be.SetService(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("svc%d", i)}, benchPorts(i, 0))
	}
	if _, err := be.Sync(context.Background(), dataplane.Node{NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}); err != nil {
		b.Fatal(err)
	}
	return be
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkState10kServices measures what the backend keeps between syncs
// for 10,000 Services x 10 endpoints (retained-MiB: the live heap after a
// full sync) and the time to build and sync it.
func BenchmarkState10kServices(b *testing.B) {
	var retained uint64
	for b.Loop() {
		before := heapInUse()
		be := benchBackend(b, 10000)
		retained = heapInUse() - before
		runtime.KeepAlive(be)
	}
	b.ReportMetric(float64(retained)/(1<<20), "retained-MiB")
}

// BenchmarkEndpointChange10kServices measures one Service's new endpoints
// rendered and synced at 10,000 Services: the agent's work for (i).
func BenchmarkEndpointChange10kServices(b *testing.B) {
	be := benchBackend(b, 10000)
	node := dataplane.Node{NodePortIPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}
	gen := 0
	b.ReportAllocs()
	for b.Loop() {
		gen++
		be.SetService(types.NamespacedName{Namespace: "ns", Name: "svc0"}, benchPorts(0, gen))
		res, err := be.Sync(context.Background(), node)
		if err != nil || res.Full || res.Rules == 0 {
			b.Fatalf("sync %+v: %v", res, err)
		}
	}
}
