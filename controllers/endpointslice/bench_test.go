package endpointslice

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
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
