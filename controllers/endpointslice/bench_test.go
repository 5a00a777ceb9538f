// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package endpointslice

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcnet-io/svcnet/test/builder"
)

// BenchmarkComputeDesiredSlices measures one sync's planning for a
// 5,000-endpoint Service in which one endpoint was replaced.
func BenchmarkComputeDesiredSlices(b *testing.B) {
	var existing []*discoveryv1.EndpointSlice
	for s := range 50 {
		existing = append(existing, existingSlice(fmt.Sprintf("s%d", s), span(s*100, s*100+100)...))
	}
	desired := desiredOf(append(span(1, 5000), 9999)...)
	meta := newSliceMeta(testService, discoveryv1.AddressTypeIPv4)
	b.ReportAllocs()
	for b.Loop() {
		p := computeDesiredSlices(meta, desired, existing, 100)
		if len(p.update) != 1 {
			b.Fatalf("want one update, got %d", len(p.update))
		}
	}
}

// BenchmarkPodEventLookup is the Service lookup of one Pod event in a
// namespace of 500 Services (scenario (b) of `make bench` handles 5,000
// such events at start-up).
func BenchmarkPodEventLookup(b *testing.B) {
	x := newSelectorIndex()
	for i := range 500 {
		name := fmt.Sprintf("svc%d", i)
		x.set(builder.Service(name, "ns").Selector("app", name).Obj())
	}
	labels := map[string]string{"app": "svc250", "pod-template-hash": "5d4f8c7b9"}
	found := 0
	b.ReportAllocs()
	for b.Loop() {
		x.matching("ns", func(string) { found++ }, labels)
	}
	if found != b.N {
		b.Fatalf("found %d Services for %d events", found, b.N)
	}
}
