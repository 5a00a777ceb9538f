// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package metallb

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// The CRD's limits on an announcement.
const (
	maxInterfaces      = 16
	maxInterfaceLength = 15
	maxPeers           = 16
)

// The defaults of MetalLB that svcnet does not share or that need no field.
const (
	metallbAggregationLength   = 32
	metallbAggregationLengthV6 = 128
	defaultBGPPort             = 179
	minHoldTime                = 3 * time.Second
	defaultHoldTime            = 90 * time.Second
	// metallbMultiHopTTL is the TTL of MetalLB's ebgpMultiHop sessions:
	// FRR's ebgp-multihop without a number.
	metallbMultiHopTTL = 255
	// metallbPasswordKey is the key of the password in MetalLB's
	// passwordSecret (of type kubernetes.io/basic-auth).
	metallbPasswordKey = "password"
	maxSecretName      = 253
	metallbNamespace   = "metallb-system"
)

// AgentNamespace is the namespace svcnet's agents run in, and read BGP
// passwords' Secrets from, unless installed elsewhere.
const AgentNamespace = "svcnet-system"

func newAnnouncement(name string, mode svcnetv1alpha1.AnnouncementMode, ref string) svcnetv1alpha1.LoadBalancerAnnouncement {
	return svcnetv1alpha1.LoadBalancerAnnouncement{
		TypeMeta:   metav1.TypeMeta{APIVersion: svcnetv1alpha1.GroupVersion.String(), Kind: "LoadBalancerAnnouncement"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{SourceAnnotation: ref}},
		Spec:       svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: mode},
	}
}

// convertL2 makes an L2 announcement of each L2Advertisement.
func convertL2(srcs []source[l2AdvertisementSpec], pools []svcnetv1alpha1.LoadBalancerIPPool, warnings *[]Warning) []svcnetv1alpha1.LoadBalancerAnnouncement {
	var out []svcnetv1alpha1.LoadBalancerAnnouncement
	for _, s := range srcs {
		a := newAnnouncement(s.name, svcnetv1alpha1.AnnouncementModeL2, s.ref)
		// MetalLB's election keeps every address on the node whose
		// speaker answers for it now: its established connections live
		// in that node's conntrack table.
		a.Spec.NodeElection = svcnetv1alpha1.L2NodeElectionMetalLB
		sel, ok := poolSelector(s.ref, s.spec.advertisementSpec, pools, warnings)
		if !ok {
			continue
		}
		a.Spec.PoolSelector = sel
		a.Spec.NodeSelector = single(s.ref, "spec.nodeSelectors", s.spec.NodeSelectors, "node", warnings)
		a.Spec.ServiceSelector = single(s.ref, "spec.serviceSelectors", s.spec.ServiceSelectors, "Service", warnings)
		for i, name := range sortedNames(s.spec.Interfaces) {
			if name == "" || len(name) > maxInterfaceLength {
				*warnings = append(*warnings, Warning{Object: s.ref, Field: fmt.Sprintf("spec.interfaces[%d]", i),
					Reason: fmt.Sprintf("%q is not a Linux interface name (1-%d characters): left out", name, maxInterfaceLength)})
				continue
			}
			a.Spec.Interfaces = append(a.Spec.Interfaces, name)
		}
		if len(a.Spec.Interfaces) > maxInterfaces {
			*warnings = append(*warnings, Warning{Object: s.ref, Field: "spec.interfaces",
				Reason: fmt.Sprintf("more than %d interfaces: those from %s on are left out", maxInterfaces, a.Spec.Interfaces[maxInterfaces])})
			a.Spec.Interfaces = a.Spec.Interfaces[:maxInterfaces]
		}
		out = append(out, a)
	}
	return out
}

// poolSelector turns an advertisement's pool names and selectors, which
// MetalLB ORs (neither: every pool), into a poolSelector. The second
// result is false when it selects no pool.
func poolSelector(ref string, adv advertisementSpec, pools []svcnetv1alpha1.LoadBalancerIPPool, warnings *[]Warning) (*metav1.LabelSelector, bool) {
	names, sels := adv.IPAddressPools, adv.IPAddressPoolSelectors
	switch {
	case len(names) == 0 && len(sels) == 0:
		return nil, true
	case len(sels) == 0:
		return namesSelector(names), true
	case len(names) == 0 && len(sels) == 1:
		return sels[0].DeepCopy(), true
	}
	matched := slices.Clone(names)
	for _, p := range pools {
		for _, s := range sels {
			if sel, err := metav1.LabelSelectorAsSelector(&s); err == nil && sel.Matches(labels.Set(p.Labels)) {
				matched = append(matched, p.Name)
				break
			}
		}
	}
	if len(matched) == 0 {
		*warnings = append(*warnings, Warning{Object: ref, Field: "spec.ipAddressPoolSelectors", Reason: "selects none of the pools: not converted"})
		return nil, false
	}
	sel := namesSelector(matched)
	*warnings = append(*warnings, Warning{Object: ref, Field: "spec.ipAddressPoolSelectors",
		Reason: fmt.Sprintf("MetalLB takes pools named or matching any selector; svcnet's poolSelector is one selector, so the announcement names the pools that match now (%s): a pool created later is not announced unless it gets a matching %s label",
			strings.Join(sel.MatchExpressions[0].Values, ", "), PoolLabel)})
	return sel, true
}

// namesSelector selects the converted pools of these names by PoolLabel.
func namesSelector(names []string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: PoolLabel, Operator: metav1.LabelSelectorOpIn, Values: sortedNames(names),
	}}}
}

// peer is a BGPPeer as svcnet needs it.
type peer struct {
	name, ref string
	localASN  int64
	spec      svcnetv1alpha1.BGPPeer
}

// convertBGP makes BGP announcements of the BGPAdvertisements and the
// BGPPeers they advertise to, with the BFD of the BFDProfiles (by name)
// the peers name. svcnet has one local AS per announcement,
// where MetalLB has one per peer: an advertisement whose peers differ in
// it becomes one announcement for each. aliases are the Community
// objects' names of community values.
func convertBGP(advs []source[bgpAdvertisementSpec], peerSrcs []source[bgpPeerSpec], profiles map[string]bfdProfileSpec, aliases map[string]string, pools []svcnetv1alpha1.LoadBalancerIPPool, warnings *[]Warning) []svcnetv1alpha1.LoadBalancerAnnouncement {
	peers := map[string]peer{}
	var allPeers []string
	for _, s := range peerSrcs {
		if p, ok := convertPeer(s, profiles, warnings); ok {
			peers[s.name] = p
			allPeers = append(allPeers, s.name)
		}
	}
	var out []svcnetv1alpha1.LoadBalancerAnnouncement
	for _, adv := range advs {
		names := allPeers
		if len(adv.spec.Peers) > 0 {
			names = nil
			for _, n := range sortedNames(adv.spec.Peers) {
				if _, ok := peers[n]; ok {
					names = append(names, n)
				} else {
					*warnings = append(*warnings, Warning{Object: adv.ref, Field: "spec.peers", Reason: fmt.Sprintf("BGPPeer %q is not among the converted peers: left out", n)})
				}
			}
		}
		if len(names) == 0 {
			*warnings = append(*warnings, Warning{Object: adv.ref, Reason: "no converted BGPPeer to advertise to: not converted"})
			continue
		}
		sel, ok := poolSelector(adv.ref, adv.spec.advertisementSpec, pools, warnings)
		if !ok {
			continue
		}
		nodes := single(adv.ref, "spec.nodeSelectors", adv.spec.NodeSelectors, "node", warnings)
		services := single(adv.ref, "spec.serviceSelectors", adv.spec.ServiceSelectors, "Service", warnings)
		attrs := pathAttributes(adv, aliases, warnings)
		groups := groupPeers(names, peers)
		for _, g := range groups {
			name := adv.name
			if len(groups) > 1 {
				name = adv.name + "-" + g.peers[0].name
			}
			a := newAnnouncement(name, svcnetv1alpha1.AnnouncementModeBGP, adv.ref)
			a.Spec.PoolSelector = sel.DeepCopy()
			a.Spec.ServiceSelector = services.DeepCopy()
			a.Spec.NodeSelector = and(nodes, g.nodes)
			a.Spec.BGP = attrs.DeepCopy()
			a.Spec.BGP.LocalASN = g.peers[0].localASN
			for _, p := range g.peers {
				if i := slices.IndexFunc(a.Spec.BGP.Peers, func(q svcnetv1alpha1.BGPPeer) bool { return q.Address == p.spec.Address }); i >= 0 {
					*warnings = append(*warnings, Warning{Object: p.ref, Field: "spec.peerAddress",
						Reason: fmt.Sprintf("BGPAdvertisement %s advertises to %s through another BGPPeer on the same nodes already: left out of it", adv.name, p.spec.Address)})
					continue
				}
				a.Spec.BGP.Peers = append(a.Spec.BGP.Peers, p.spec)
			}
			out = append(out, a)
		}
	}
	return out
}

// peerGroup is the peers of one announcement made of an advertisement,
// and the node selector that announcement adds to the advertisement's.
type peerGroup struct {
	peers []peer
	nodes *metav1.LabelSelector
}

// groupPeers groups the named peers by local AS, in the order of their
// first member's name. An announcement lists a router once, so BGPPeers
// that share an address (the same router address in every rack, say) go
// to announcements of their own, whose nodeSelector takes the peer's so
// that they do not overlap.
func groupPeers(names []string, peers map[string]peer) []peerGroup {
	perAddress := map[string]int{}
	for _, n := range names {
		perAddress[peers[n].spec.Address]++
	}
	var groups []peerGroup
	index := map[string]int{}
	for _, n := range names {
		p := peers[n]
		key := fmt.Sprint(p.localASN)
		var nodes *metav1.LabelSelector
		if perAddress[p.spec.Address] > 1 {
			nodes, p.spec.NodeSelector = p.spec.NodeSelector, nil
			key += "/" + selectorKey(nodes)
		}
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, peerGroup{nodes: nodes})
		}
		groups[i].peers = append(groups[i].peers, p)
	}
	return groups
}

// convertPeer turns a BGPPeer into svcnet's peer; false when it cannot be.
func convertPeer(s source[bgpPeerSpec], profiles map[string]bfdProfileSpec, warnings *[]Warning) (peer, bool) {
	w := func(field, reason string) {
		*warnings = append(*warnings, Warning{Object: s.ref, Field: field, Reason: reason})
	}
	spec := s.spec
	addr, err := netip.ParseAddr(spec.Address)
	switch {
	case spec.Address == "" && spec.Interface != "":
		w("spec.interface", "svcnet peers with addresses, not over an interface (BGP unnumbered): the peer is not converted")
		return peer{}, false
	case err != nil:
		w("spec.peerAddress", fmt.Sprintf("%q is not an IP address: the peer is not converted", spec.Address))
		return peer{}, false
	case spec.ASN == 0 && spec.DynamicASN != "":
		w("spec.dynamicASN", "svcnet needs the peer's AS number (asn): the peer is not converted")
		return peer{}, false
	case spec.ASN == 0 || spec.MyASN == 0:
		w("spec", "peerASN and myASN are required: the peer is not converted")
		return peer{}, false
	}
	p := peer{name: s.name, ref: s.ref, localASN: int64(spec.MyASN),
		spec: svcnetv1alpha1.BGPPeer{Address: addr.String(), ASN: int64(spec.ASN)}}
	if spec.LocalASN != 0 && spec.LocalASN != spec.MyASN {
		p.localASN = int64(spec.LocalASN)
		w("spec.localASN", fmt.Sprintf("the peer sees AS %d (local-as), so bgp.localASN is %d; svcnet has no separate router AS (myASN %d)", spec.LocalASN, spec.LocalASN, spec.MyASN))
	}
	if spec.Port != 0 && spec.Port != defaultBGPPort {
		p.spec.Port = int32(spec.Port)
	}
	convertTimers(spec, &p.spec, w)
	convertPassword(s, &p.spec, w)
	convertTransport(spec, p.localASN, addr, &p.spec, w)
	convertBFD(spec, profiles, &p.spec, w)
	p.spec.NodeSelector = single(s.ref, "spec.nodeSelectors", spec.NodeSelectors, "node", warnings)
	warnPeer(spec, w)
	return p, true
}

// convertTimers converts the hold, keepalive and graceful restart times.
func convertTimers(spec bgpPeerSpec, out *svcnetv1alpha1.BGPPeer, w func(field, reason string)) {
	hold := defaultHoldTime
	if h := spec.HoldTime; h != nil {
		if h.Duration < minHoldTime {
			w("spec.holdTime", fmt.Sprintf("%s is under svcnet's minimum of %s: left out (%s)", h.Duration, minHoldTime, defaultHoldTime))
		} else {
			hold = h.Duration
			out.HoldTime = h.DeepCopy()
		}
	}
	if k := spec.KeepaliveTime; k != nil {
		if k.Duration <= 0 || k.Duration > hold {
			w("spec.keepaliveTime", fmt.Sprintf("%s is not between 0 and the holdTime %s: left out (a third of holdTime)", k.Duration, hold))
		} else {
			out.KeepaliveTime = k.DeepCopy()
		}
	}
	if !spec.EnableGracefulRestart {
		// MetalLB's default is off, svcnet's on.
		out.GracefulRestartTime = &metav1.Duration{}
	}
}

// convertPassword turns MetalLB's password or passwordSecret into a
// passwordSecretRef. svcnet reads passwords from Secrets in the agents'
// namespace only, so a plain password, or a Secret elsewhere (MetalLB's
// are in its own namespace), becomes a reference to a Secret the
// operator creates, with the command that does.
func convertPassword(s source[bgpPeerSpec], out *svcnetv1alpha1.BGPPeer, w func(field, reason string)) {
	spec := s.spec
	if ref := spec.PasswordSecret; ref != nil {
		if spec.Password != "" {
			w("spec.password", "beside passwordSecret, which MetalLB refuses: left out, passwordSecret is used")
		}
		if ref.Name == "" {
			w("spec.passwordSecret", "names no Secret: left out, the session has no password")
			return
		}
		out.PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{Name: ref.Name, Key: metallbPasswordKey}
		// Unset in both (a BGPPeer from a file without one): MetalLB's
		// own, as its installation names it.
		ns := cmp.Or(ref.Namespace, s.namespace, metallbNamespace)
		if ns != AgentNamespace {
			w("spec.passwordSecret", fmt.Sprintf("svcnet reads Secrets from the agents' namespace (%[1]s by default) only, and Secret %[2]s/%[3]s is in %[2]s: passwordSecretRef names %[3]s; copy it before applying, with `kubectl -n %[2]s get secret %[3]s -o jsonpath='{.data.%[4]s}' | base64 -d | kubectl -n %[1]s create secret generic %[3]s --from-file=%[4]s=/dev/stdin`, or the nodes leave this peer out",
				AgentNamespace, ns, ref.Name, metallbPasswordKey))
		}
		return
	}
	if spec.Password == "" {
		return
	}
	name := passwordSecretName(s.name)
	out.PasswordSecretRef = &svcnetv1alpha1.BGPPasswordSecretRef{Name: name, Key: metallbPasswordKey}
	w("spec.password", fmt.Sprintf("svcnet takes passwords from Secrets only: passwordSecretRef names Secret %[1]s/%[2]s, which you create before applying with `kubectl -n %[1]s create secret generic %[2]s --from-literal=%[3]s=...`, with the password of spec.password, or the nodes leave this peer out",
		AgentNamespace, name, metallbPasswordKey))
}

// passwordSecretName is the Secret suggested for a BGPPeer's plain
// password: a Secret's name, at most 253 characters.
func passwordSecretName(peerName string) string {
	const suffix = "-bgp-password"
	if n := maxSecretName - len(suffix); len(peerName) > n {
		peerName = strings.TrimRight(peerName[:n], ".-")
	}
	return peerName + suffix
}

// convertTransport converts ebgpMultiHop and sourceAddress.
func convertTransport(spec bgpPeerSpec, localASN int64, addr netip.Addr, out *svcnetv1alpha1.BGPPeer, w func(field, reason string)) {
	if spec.EBGPMultiHop {
		if int64(spec.ASN) == localASN {
			w("spec.ebgpMultiHop", fmt.Sprintf("the peer is iBGP (peerASN %d is the local AS), which needs no multihop and svcnet refuses it for: left out", spec.ASN))
		} else {
			// FRR's ebgp-multihop without a number, as MetalLB writes it.
			out.EBGPMultiHop = metallbMultiHopTTL
		}
	}
	if spec.SourceAddress != "" {
		src, err := netip.ParseAddr(spec.SourceAddress)
		switch {
		case err != nil:
			w("spec.sourceAddress", fmt.Sprintf("%q is not an IP address: left out", spec.SourceAddress))
		case src.Unmap().Is4() != addr.Unmap().Is4():
			w("spec.sourceAddress", fmt.Sprintf("%s is not of the family of peerAddress %s: left out", src, addr))
		default:
			out.SourceAddress = src.String()
		}
	}
}

// warnPeer warns about a BGPPeer's fields that svcnet has no counterpart for.
func warnPeer(spec bgpPeerSpec, w func(field, reason string)) {
	for _, f := range []struct {
		set           bool
		field, reason string
	}{
		{spec.RouterID != "", "spec.routerID", "svcnet's router ID is per node, not per peer: the Node annotation " + svcnetv1alpha1.AnnotationBGPRouterID + ", else the node's IPv4 address; annotate the nodes that need this one"},
		{spec.ConnectTime != nil, "spec.connectTime", "svcnet retries connecting every second"},
		{spec.VRF != "", "spec.vrf", "svcnet peers from the node's default VRF"},
		{spec.DisableMP, "spec.disableMP", "svcnet has no such setting: each session carries its peer address's family only"},
		{spec.DualStackAddressFamily, "spec.dualStackAddressFamily", "svcnet's sessions carry the peer address's family only: announce IPv6 addresses to an IPv6 peer"},
		{spec.Interface != "", "spec.interface", "svcnet peers with peerAddress, not over an interface"},
	} {
		if f.set {
			w(f.field, f.reason)
		}
	}
}
