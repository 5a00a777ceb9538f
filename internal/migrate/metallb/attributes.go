// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// maxCommunities is the CRD's limit on an announcement's communities and
// on its large communities.
const maxCommunities = 32

// largePrefix marks a large community in MetalLB's lists.
const largePrefix = "large:"

// communityAliases are the names MetalLB's Community objects give
// community values, which BGPAdvertisements may use in their place.
func communityAliases(srcs []source[communitySpec], warnings *[]Warning) map[string]string {
	aliases := map[string]string{}
	for _, s := range srcs {
		for i, c := range s.spec.Communities {
			field := fmt.Sprintf("spec.communities[%d]", i)
			if _, _, err := parseCommunity(c.Value); err != nil {
				*warnings = append(*warnings, Warning{Object: s.ref, Field: field, Reason: fmt.Sprintf("%s: advertisements that use %q do not get it", err, c.Name)})
				continue
			}
			if v, ok := aliases[c.Name]; ok && v != c.Value {
				*warnings = append(*warnings, Warning{Object: s.ref, Field: field, Reason: fmt.Sprintf("%q is %s in a Community before it: this one is ignored", c.Name, v)})
				continue
			}
			aliases[c.Name] = c.Value
		}
	}
	return aliases
}

// pathAttributes turns a BGPAdvertisement's communities, which name
// aliases or are values ("large:" before a large community's), and its
// localPref into svcnet's.
func pathAttributes(adv source[bgpAdvertisementSpec], aliases map[string]string, warnings *[]Warning) svcnetv1alpha1.BGPAnnouncement {
	var out svcnetv1alpha1.BGPAnnouncement
	for i, c := range adv.spec.Communities {
		value := c
		if v, ok := aliases[c]; ok {
			value = v
		}
		s, large, err := parseCommunity(value)
		if err != nil {
			*warnings = append(*warnings, Warning{Object: adv.ref, Field: fmt.Sprintf("spec.communities[%d]", i),
				Reason: fmt.Sprintf("%s, nor the name of one in a Community: left out", err)})
			continue
		}
		if large {
			out.LargeCommunities = append(out.LargeCommunities, s)
		} else {
			out.Communities = append(out.Communities, s)
		}
	}
	out.Communities = limitCommunities(adv.ref, "spec.communities", "communities", out.Communities, warnings)
	out.LargeCommunities = limitCommunities(adv.ref, "spec.communities", "large communities", out.LargeCommunities, warnings)
	if adv.spec.LocalPref != 0 {
		lp := int64(adv.spec.LocalPref)
		out.LocalPreference = &lp
	}
	if l := adv.spec.AggregationLength; l != nil && *l != metallbAggregationLength {
		out.AggregationLength = ptr.To(*l)
	}
	if l := adv.spec.AggregationLengthV6; l != nil && *l != metallbAggregationLengthV6 {
		out.AggregationLengthV6 = ptr.To(*l)
	}
	return out
}

// parseCommunity parses MetalLB's "ASN:value" or "large:global:local1:local2"
// with svcnet's parsers, into the form svcnet writes; true for a large one.
// Names (MetalLB has none of its own) are Community aliases, resolved before.
func parseCommunity(s string) (string, bool, error) {
	if rest, ok := strings.CutPrefix(s, largePrefix); ok {
		c, err := announcementpolicy.ParseLargeCommunity(rest)
		if err != nil {
			return "", false, fmt.Errorf("%q is not a community: %w", s, err)
		}
		return fmt.Sprintf("%d:%d:%d", c.Global, c.Local1, c.Local2), true, nil
	}
	if strings.Count(s, ":") != 1 {
		return "", false, fmt.Errorf("%q is not a community (ASN:value, or large:global:local1:local2)", s)
	}
	v, err := announcementpolicy.ParseCommunity(s)
	if err != nil {
		return "", false, fmt.Errorf("%q is not a community: %w", s, err)
	}
	return fmt.Sprintf("%d:%d", v>>16, v&0xFFFF), false, nil
}

// limitCommunities sorts and deduplicates communities and cuts them to
// the CRD's limit.
func limitCommunities(ref, field, what string, cs []string, warnings *[]Warning) []string {
	slices.Sort(cs)
	cs = slices.Compact(cs)
	if len(cs) > maxCommunities {
		*warnings = append(*warnings, Warning{Object: ref, Field: field,
			Reason: fmt.Sprintf("more than %d %s: those from %s on are left out", maxCommunities, what, cs[maxCommunities])})
		cs = cs[:maxCommunities]
	}
	return cs
}

// joinAttributes gives into, which a joins, the path attributes of both.
// svcnet has them per announcement: the union of the communities, and
// into's localPreference (a's if into has none). That is what MetalLB
// sends where both advertised a route to the same peers, bar two
// localPrefs; where their peers differ, each peer now gets the other's
// attributes too.
func joinAttributes(into *svcnetv1alpha1.LoadBalancerAnnouncement, a svcnetv1alpha1.LoadBalancerAnnouncement, warnings *[]Warning) {
	x, y := into.Spec.BGP, a.Spec.BGP
	joinAggregation(into, a, warnings)
	same := slices.Equal(x.Communities, y.Communities) && slices.Equal(x.LargeCommunities, y.LargeCommunities) &&
		equalPref(x.LocalPreference, y.LocalPreference)
	if same {
		return
	}
	prefsClash := x.LocalPreference != nil && y.LocalPreference != nil && *x.LocalPreference != *y.LocalPreference
	warn := func(field, reason string) {
		*warnings = append(*warnings, Warning{Object: a.Annotations[SourceAnnotation], Field: field, Reason: reason})
	}
	switch {
	case !samePeers(x.Peers, y.Peers):
		warn("spec", fmt.Sprintf("joined with %s (same pools and nodes, which svcnet announces once), whose peers and path attributes differ; svcnet has one set of attributes per announcement, so the routes to the peers of both carry the communities of both and %s", into.Name, prefString(x.LocalPreference, y.LocalPreference)))
	case prefsClash:
		warn("spec.localPref", fmt.Sprintf("joined with %s (same pools and peers), whose localPref is %d: svcnet keeps that one, not %d", into.Name, *x.LocalPreference, *y.LocalPreference))
	}
	x.Communities = limitCommunities(into.Annotations[SourceAnnotation], "spec.communities", "communities", append(x.Communities, y.Communities...), warnings)
	x.LargeCommunities = limitCommunities(into.Annotations[SourceAnnotation], "spec.communities", "large communities", append(x.LargeCommunities, y.LargeCommunities...), warnings)
	if x.LocalPreference == nil {
		x.LocalPreference = y.LocalPreference
	}
}

func equalPref(a, b *int64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// prefString says which localPreference joined announcements keep.
func prefString(into, a *int64) string {
	switch {
	case into != nil:
		return "localPreference " + strconv.FormatInt(*into, 10)
	case a != nil:
		return "localPreference " + strconv.FormatInt(*a, 10)
	}
	return "no localPreference"
}

// samePeers tells whether two lists hold the same peer addresses.
func samePeers(a, b []svcnetv1alpha1.BGPPeer) bool {
	addrs := func(ps []svcnetv1alpha1.BGPPeer) []string {
		out := make([]string, 0, len(ps))
		for _, p := range ps {
			out = append(out, p.Address)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(addrs(a), addrs(b))
}

// joinAggregation gives into the longer of both's aggregation lengths of
// each family: svcnet advertises one route per address and announcement,
// where MetalLB may send a /32 to some peers and an aggregate to others
// (two advertisements of one pool); the peers that got the aggregate get
// the more specific routes instead, which reach the same nodes.
func joinAggregation(into *svcnetv1alpha1.LoadBalancerAnnouncement, a svcnetv1alpha1.LoadBalancerAnnouncement, warnings *[]Warning) {
	for _, f := range []struct {
		field, yaml string
		x, y        **int32
		full        int32
	}{
		{"aggregationLength", "spec.aggregationLength", &into.Spec.BGP.AggregationLength, &a.Spec.BGP.AggregationLength, metallbAggregationLength},
		{"aggregationLengthV6", "spec.aggregationLengthV6", &into.Spec.BGP.AggregationLengthV6, &a.Spec.BGP.AggregationLengthV6, metallbAggregationLengthV6},
	} {
		x, y := ptr.Deref(*f.x, f.full), ptr.Deref(*f.y, f.full)
		if x == y {
			continue
		}
		keep := max(x, y)
		*warnings = append(*warnings, Warning{Object: a.Annotations[SourceAnnotation], Field: f.yaml,
			Reason: fmt.Sprintf("joined with %s (same pools and nodes, which svcnet announces once), whose %s is %d where this one's is %d: svcnet advertises /%d routes to the peers of both",
				into.Name, f.field, x, y, keep)})
		*f.x = nil
		if keep != f.full {
			*f.x = ptr.To(keep)
		}
	}
}
