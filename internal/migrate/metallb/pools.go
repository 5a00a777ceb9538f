// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// maxAddressItems is the CRD's limit on a pool's cidrs and on its ranges.
const maxAddressItems = 64

// convertPools makes a LoadBalancerIPPool of each IPAddressPool.
func convertPools(srcs []source[ipAddressPoolSpec], warnings *[]Warning) []svcnetv1alpha1.LoadBalancerIPPool {
	prio := priorities(srcs)
	out := make([]svcnetv1alpha1.LoadBalancerIPPool, 0, len(srcs))
	for _, s := range srcs {
		p := svcnetv1alpha1.LoadBalancerIPPool{
			TypeMeta:   metav1.TypeMeta{APIVersion: svcnetv1alpha1.GroupVersion.String(), Kind: "LoadBalancerIPPool"},
			ObjectMeta: objectMeta(s.name, s.ref, s.labels),
		}
		if errs := validation.IsValidLabelValue(s.name); len(errs) == 0 {
			p.Labels[PoolLabel] = s.name
		} else {
			*warnings = append(*warnings, Warning{Object: s.ref, Field: "metadata.name",
				Reason: fmt.Sprintf("not a label value (%s), so the pool has no %s label and announcements converted from advertisements that name it do not select it", strings.Join(errs, "; "), PoolLabel)})
		}
		p.Spec.CIDRs, p.Spec.Ranges = convertAddresses(s.ref, s.spec.Addresses, warnings)
		if len(p.Spec.CIDRs) == 0 && len(p.Spec.Ranges) == 0 {
			*warnings = append(*warnings, Warning{Object: s.ref, Field: "spec.addresses", Reason: "no address svcnet can use: the pool is not converted"})
			continue
		}
		if s.spec.AutoAssign != nil && !*s.spec.AutoAssign {
			p.Spec.Assignment = svcnetv1alpha1.PoolAssignmentOnRequest
		}
		p.Spec.AvoidBuggyIPs = s.spec.AvoidBuggyIPs
		p.Spec.Priority = prio[s.name]
		if sa := s.spec.ServiceAllocation; sa != nil {
			p.Spec.NamespaceSelector = namespaceSelector(s.ref, sa, warnings)
			p.Spec.ServiceSelector = single(s.ref, "spec.serviceAllocation.serviceSelectors", sa.ServiceSelectors, "Service", warnings)
		}
		out = append(out, p)
	}
	return out
}

func objectMeta(name, ref string, labels map[string]string) metav1.ObjectMeta {
	l := maps.Clone(labels)
	if l == nil {
		l = map[string]string{}
	}
	return metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{SourceAnnotation: ref}}
}

// priorities reproduces MetalLB's order of pools in svcnet's priorities.
// MetalLB tries the pools whose serviceAllocation matches a Service
// first, the lowest positive priority first and 0 last, then the pools
// without serviceAllocation (in no defined order); svcnet tries the
// highest priority first. So pools without serviceAllocation keep 0, and
// the others are ranked above them, compactly.
func priorities(srcs []source[ipAddressPoolSpec]) map[string]int32 {
	var positive []int
	zero := false
	for _, s := range srcs {
		switch sa := s.spec.ServiceAllocation; {
		case sa == nil:
		case sa.Priority > 0:
			positive = append(positive, sa.Priority)
		default:
			zero = true
		}
	}
	slices.Sort(positive)
	positive = slices.Compact(positive)
	base := int32(1)
	if zero {
		base = 2
	}
	out := make(map[string]int32, len(srcs))
	for _, s := range srcs {
		sa := s.spec.ServiceAllocation
		switch {
		case sa == nil:
			out[s.name] = 0
		case sa.Priority > 0:
			i, _ := slices.BinarySearch(positive, sa.Priority)
			out[s.name] = base + int32(len(positive)-1-i)
		default:
			out[s.name] = 1
		}
	}
	// The lowest is 0, which needs no field.
	if len(out) > 0 {
		lowest := slices.Min(slices.Collect(maps.Values(out)))
		for name := range out {
			out[name] -= lowest
		}
	}
	return out
}

// namespaceSelector turns serviceAllocation's namespaces and
// namespaceSelectors, which MetalLB ORs, into one selector.
func namespaceSelector(ref string, sa *serviceAllocation, warnings *[]Warning) *metav1.LabelSelector {
	switch {
	case len(sa.Namespaces) > 0 && len(sa.NamespaceSelectors) > 0:
		*warnings = append(*warnings, Warning{Object: ref, Field: "spec.serviceAllocation.namespaceSelectors",
			Reason: "MetalLB takes namespaces named in namespaces or matching a selector; svcnet's namespaceSelector is one selector, so the pool is converted without one (every namespace: no Service loses its address); narrow it by hand"})
		return nil
	case len(sa.Namespaces) > 0:
		names := slices.Sorted(slices.Values(sa.Namespaces))
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: slices.Compact(names),
		}}}
	default:
		return single(ref, "spec.serviceAllocation.namespaceSelectors", sa.NamespaceSelectors, "namespace", warnings)
	}
}

// single turns a list of selectors, which MetalLB ORs, into svcnet's one:
// with several, nil (everything, so that no Service loses its address or
// announcement) and a warning.
func single(ref, field string, sels []metav1.LabelSelector, what string, warnings *[]Warning) *metav1.LabelSelector {
	switch len(sels) {
	case 0:
		return nil
	case 1:
		return sels[0].DeepCopy()
	}
	*warnings = append(*warnings, Warning{Object: ref, Field: field,
		Reason: fmt.Sprintf("MetalLB takes a %s matching any of %d selectors; svcnet has one selector here, so it is left out (every %s); narrow it by hand, e.g. to a label all of them select", what, len(sels), what)})
	return nil
}

// convertAddresses splits MetalLB's addresses into cidrs and ranges,
// cutting IPv6 blocks and ranges into the /64s svcnet requires.
func convertAddresses(ref string, addrs []string, warnings *[]Warning) ([]string, []svcnetv1alpha1.IPRange) {
	var cidrs []string
	var ranges []svcnetv1alpha1.IPRange
	warn := func(i int, reason string) {
		*warnings = append(*warnings, Warning{Object: ref, Field: fmt.Sprintf("spec.addresses[%d]", i), Reason: reason})
	}
	for i, a := range addrs {
		first, last, isRange := strings.Cut(a, "-")
		if !isRange {
			p, err := netip.ParsePrefix(strings.TrimSpace(a))
			if err != nil {
				warn(i, fmt.Sprintf("%q is not a CIDR: not converted", a))
				continue
			}
			blocks, err := splitPrefix(p.Masked())
			if err != nil {
				warn(i, err.Error())
				continue
			}
			cidrs = append(cidrs, blocks...)
			continue
		}
		start, err1 := netip.ParseAddr(strings.TrimSpace(first))
		end, err2 := netip.ParseAddr(strings.TrimSpace(last))
		switch {
		case err1 != nil || err2 != nil:
			warn(i, fmt.Sprintf("%q is not a range of two addresses: not converted", a))
		case start.Is4() != end.Is4():
			warn(i, fmt.Sprintf("%q mixes address families: not converted", a))
		case end.Less(start):
			warn(i, fmt.Sprintf("%q ends before it starts: not converted", a))
		default:
			rs, err := splitRange(start, end)
			if err != nil {
				warn(i, err.Error())
				continue
			}
			ranges = append(ranges, rs...)
		}
	}
	cidrs = slices.Compact(cidrs)
	if len(cidrs) > maxAddressItems {
		*warnings = append(*warnings, Warning{Object: ref, Field: "spec.addresses",
			Reason: fmt.Sprintf("%d CIDRs, more than a pool's %d: the rest (from %s) are left out; put them in another pool", len(cidrs), maxAddressItems, cidrs[maxAddressItems])})
		cidrs = cidrs[:maxAddressItems]
	}
	if len(ranges) > maxAddressItems {
		*warnings = append(*warnings, Warning{Object: ref, Field: "spec.addresses",
			Reason: fmt.Sprintf("%d ranges, more than a pool's %d: the rest (from %s) are left out; put them in another pool", len(ranges), maxAddressItems, ranges[maxAddressItems].Start)})
		ranges = ranges[:maxAddressItems]
	}
	return cidrs, ranges
}

// splitPrefix returns p, or the /64s of an IPv6 block shorter than /64,
// which svcnet refuses, when they fit in a pool.
func splitPrefix(p netip.Prefix) ([]string, error) {
	if p.Addr().Is4() || p.Bits() >= 64 {
		return []string{p.String()}, nil
	}
	if 64-p.Bits() > 6 {
		return nil, fmt.Errorf("%s holds %d /64 blocks; svcnet's IPv6 blocks are /64 or longer and a pool holds %d: not converted; list the /64s your Services use", p, uint64(1)<<(64-p.Bits()), maxAddressItems)
	}
	n := 1 << (64 - p.Bits())
	out := make([]string, 0, n)
	hi := high(p.Addr())
	for k := range uint64(n) {
		out = append(out, netip.PrefixFrom(fromHalves(hi+k, 0), 64).String())
	}
	return out, nil
}

// splitRange returns the range, cut at /64 boundaries if it is IPv6: an
// IPv6 range of svcnet lies within one /64.
func splitRange(start, end netip.Addr) ([]svcnetv1alpha1.IPRange, error) {
	if start.Is4() || high(start) == high(end) {
		return []svcnetv1alpha1.IPRange{{Start: start.String(), End: end.String()}}, nil
	}
	n := high(end) - high(start) + 1
	if n > maxAddressItems {
		return nil, fmt.Errorf("%s-%s spans %d /64 blocks; an IPv6 range of svcnet lies within one /64 and a pool holds %d: not converted", start, end, n, maxAddressItems)
	}
	out := make([]svcnetv1alpha1.IPRange, 0, n)
	for hi := high(start); hi <= high(end); hi++ {
		s, e := fromHalves(hi, 0), fromHalves(hi, ^uint64(0))
		if hi == high(start) {
			s = start
		}
		if hi == high(end) {
			e = end
		}
		out = append(out, svcnetv1alpha1.IPRange{Start: s.String(), End: e.String()})
	}
	return out, nil
}

func high(a netip.Addr) uint64 {
	b := a.As16()
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

func fromHalves(hi, lo uint64) netip.Addr {
	var b [16]byte
	for i := range 8 {
		b[7-i] = byte(hi >> (8 * i))
		b[15-i] = byte(lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

// sortedNames lists names sorted and without repeats.
func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, cmp.Compare)
	return slices.Compact(out)
}
