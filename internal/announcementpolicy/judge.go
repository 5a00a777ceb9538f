// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announcementpolicy

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// Verdict is what Judge decided about one announcement.
type Verdict struct {
	Accepted bool
	Reason   string
	Message  string
}

// Judge decides which announcements the agents may use. An announcement is
// refused when its spec cannot be used (InvalidSpec) or when it overlaps
// one accepted before it (Overlap): two of the same mode that would both
// apply to a pool on a node, or two BGP announcements that give one node
// the same peer with different settings. Seniority decides which of two
// overlapping ones works: the one whose status already accepts it, else
// the older, then by name; so a mistaken new object never takes over from
// one in use.
func Judge(anns []*svcnetv1alpha1.LoadBalancerAnnouncement, pools []*svcnetv1alpha1.LoadBalancerIPPool, nodes []*corev1.Node) map[string]Verdict {
	ordered := slices.Clone(anns)
	slices.SortFunc(ordered, func(a, b *svcnetv1alpha1.LoadBalancerAnnouncement) int {
		if aa, ba := a.Accepted(), b.Accepted(); aa != ba {
			if aa {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	out := make(map[string]Verdict, len(anns))
	var accepted []*Announcement
	for _, raw := range ordered {
		a, err := Compile(raw)
		if err != nil {
			out[raw.Name] = Verdict{Reason: svcnetv1alpha1.ReasonAnnouncementInvalid, Message: err.Error()}
			continue
		}
		if msg := aggregationMisfit(a, pools); msg != "" {
			out[raw.Name] = Verdict{Reason: svcnetv1alpha1.ReasonAnnouncementInvalid, Message: msg}
			continue
		}
		if msg := firstOverlap(a, accepted, pools, nodes); msg != "" {
			out[raw.Name] = Verdict{Reason: svcnetv1alpha1.ReasonAnnouncementOverlap, Message: msg}
			continue
		}
		accepted = append(accepted, a)
		out[raw.Name] = Verdict{Accepted: true, Reason: svcnetv1alpha1.ReasonAnnouncementAccepted, Message: acceptedMessage(a)}
	}
	return out
}

func acceptedMessage(a *Announcement) string {
	if a.Mode == svcnetv1alpha1.AnnouncementModeBGP {
		return fmt.Sprintf("announced by BGP to %d peer(s)", len(a.Peers))
	}
	return "announced by ARP and NDP"
}

// firstOverlap describes the first accepted announcement a overlaps, or
// returns "".
func firstOverlap(a *Announcement, accepted []*Announcement, pools []*svcnetv1alpha1.LoadBalancerIPPool, nodes []*corev1.Node) string {
	for _, b := range accepted {
		if a.Mode != b.Mode {
			continue
		}
		for _, n := range nodes {
			if !a.SelectsNode(n) || !b.SelectsNode(n) {
				continue
			}
			for _, p := range pools {
				if a.SelectsPool(p) && b.SelectsPool(p) {
					return fmt.Sprintf("LoadBalancerAnnouncement %q already announces pool %s from node %s in mode %s; make their poolSelector or nodeSelector disjoint", b.Name, p.Name, n.Name, a.Mode)
				}
			}
			if msg := peerConflict(a, b, n); msg != "" {
				return fmt.Sprintf("on node %s, %s", n.Name, msg)
			}
		}
	}
	return ""
}

// peerConflict describes a peer both announcements give a node with
// different settings: a node has one session per peer address.
func peerConflict(a, b *Announcement, n *corev1.Node) string {
	for _, pa := range a.PeersOf(n) {
		for _, pb := range b.PeersOf(n) {
			if pa.Address == pb.Address && pa != pb {
				return fmt.Sprintf("peer %s has other settings in LoadBalancerAnnouncement %q (one session per peer and node); give both the same settings", pa.Address, b.Name)
			}
		}
	}
	return ""
}
