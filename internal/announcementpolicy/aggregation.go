// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/svcnet-io/svcnet/allocator/ipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// compileAggregation reads a BGP announcement's aggregation lengths,
// defaulting to a route per address.
func compileAggregation(b *svcnetv1alpha1.BGPAnnouncement) (v4, v6 int, err error) {
	v4, v6 = 32, 128
	var errs []error
	if l := b.AggregationLength; l != nil {
		if *l < 0 || *l > 32 {
			errs = append(errs, fmt.Errorf("bgp.aggregationLength %d is out of range 0-32", *l))
		} else {
			v4 = int(*l)
		}
	}
	if l := b.AggregationLengthV6; l != nil {
		if *l < 0 || *l > 128 {
			errs = append(errs, fmt.Errorf("bgp.aggregationLengthV6 %d is out of range 0-128", *l))
		} else {
			v6 = int(*l)
		}
	}
	return v4, v6, errors.Join(errs...)
}

// RoutePrefix is the prefix a node advertises for addr: the address
// itself, or the prefix of the aggregation length that holds it.
func (a *Announcement) RoutePrefix(addr netip.Addr) netip.Prefix {
	bits := a.AggregationLength
	if addr.Is6() {
		bits = a.AggregationLengthV6
	}
	p, _ := addr.Prefix(bits)
	return p
}

// aggregationMisfit describes the first range of a pool the announcement
// covers whose aggregated routes would reach beyond it, or returns "":
// every route must lie within the pool, or a node would attract traffic
// for addresses that are not its pool's (another pool's, another
// network's). A range fits when it begins and ends on prefixes of the
// aggregation length.
func aggregationMisfit(a *Announcement, pools []*svcnetv1alpha1.LoadBalancerIPPool) string {
	if a.Mode != svcnetv1alpha1.AnnouncementModeBGP {
		return ""
	}
	for _, p := range Pools(pools) {
		if !a.SelectsPool(p.Pool) {
			continue
		}
		for _, r := range p.Ranges {
			first, last := a.RoutePrefix(r.Start), a.RoutePrefix(r.End)
			if first.Addr() == r.Start && ipam.LastAddr(last) == r.End {
				continue
			}
			field, bits := "aggregationLength", a.AggregationLength
			if r.Start.Is6() {
				field, bits = "aggregationLengthV6", a.AggregationLengthV6
			}
			reach := first
			if first.Addr() == r.Start {
				reach = last
			}
			return fmt.Sprintf("bgp.%s %d would advertise %s, beyond pool %s's %s; raise it until each route lies within the pool",
				field, bits, reach, p.Pool.Name, r)
		}
	}
	return ""
}
