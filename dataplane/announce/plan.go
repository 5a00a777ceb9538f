// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/svcnet-io/svcnet/internal/lbclass"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

// world is what the plan is made from, as the agent's caches hold it.
type world struct {
	node string
	// serve picks the LoadBalancer Services whose addresses are
	// announced: those the manager serves.
	serve         lbclass.Selection
	nodes         []*corev1.Node
	announcements []*announcementpolicy.Announcement // accepted ones only
	pools         []announcementpolicy.Pool
	services      []*corev1.Service
	// slices are the EndpointSlices of each Service.
	slices map[types.NamespacedName][]*discoveryv1.EndpointSlice
	// byKey indexes services; makePlan fills it.
	byKey map[types.NamespacedName]*corev1.Service
}

// service is the Service of key, nil if it is not in the world.
func (w *world) service(key types.NamespacedName) *corev1.Service {
	return w.byKey[key]
}

// addrPlan is one LoadBalancer address as this node sees it.
type addrPlan struct {
	addr netip.Addr
	// services are the Services holding it, sorted by namespace and name.
	services []types.NamespacedName
	// announcement covers the address and selects this node.
	announcement *announcementpolicy.Announcement
	// candidates are the nodes that may announce it: selected by the
	// announcement and, under Local, with a usable endpoint of every
	// Local Service on the address.
	candidates []string
	// ready are the candidates whose Node is Ready.
	ready []string
}

// plan is what this node may announce.
type plan struct {
	// l2 are the addresses of L2 announcements selecting this node, with
	// their candidates (this node among them or not).
	l2 []addrPlan
	// l2Interfaces are, per interface name ("" for the InternalIP's), the
	// L2 announcements this node serves there.
	l2Interfaces map[string][]string
	// bgp are the addresses this node should advertise.
	bgp []addrPlan
	// peers are the BGP peers of the announcements selecting this node
	// whose nodeSelector matches it.
	peers []announcementpolicy.Peer
	// peerAnnouncements name the announcement each peer comes from (the
	// first by name), for the Events about it.
	peerAnnouncements map[netip.Addr]string
	// internalIPs are every node's InternalIPs, for the L2 segments' UDP
	// liveness path.
	internalIPs map[string][]netip.Addr
}

// makePlan decides what this node may announce. Pure.
func makePlan(w world) plan {
	p := plan{l2Interfaces: map[string][]string{}, peerAnnouncements: map[netip.Addr]string{}, internalIPs: internalIPs(w.nodes)}
	w.byKey = make(map[types.NamespacedName]*corev1.Service, len(w.services))
	for _, svc := range w.services {
		w.byKey[client.ObjectKeyFromObject(svc)] = svc
	}
	self := findNode(w.nodes, w.node)
	if self == nil {
		return p // a node without its Node object announces nothing
	}
	mine := map[svcnetv1alpha1.AnnouncementMode][]*announcementpolicy.Announcement{}
	for _, a := range w.announcements {
		if a.SelectsNode(self) {
			mine[a.Mode] = append(mine[a.Mode], a)
		}
	}
	for _, a := range mine[svcnetv1alpha1.AnnouncementModeL2] {
		ifaces := a.Interfaces
		if len(ifaces) == 0 {
			ifaces = []string{""}
		}
		for _, i := range ifaces {
			p.l2Interfaces[i] = append(p.l2Interfaces[i], a.Name)
		}
	}
	bgpAnns := slices.SortedFunc(slices.Values(mine[svcnetv1alpha1.AnnouncementModeBGP]), func(a, b *announcementpolicy.Announcement) int {
		return cmp.Compare(a.Name, b.Name)
	})
	for _, a := range bgpAnns {
		for _, peer := range a.PeersOf(self) {
			if _, seen := p.peerAnnouncements[peer.Address]; !seen {
				p.peerAnnouncements[peer.Address] = a.Name
				p.peers = append(p.peers, peer)
			}
		}
	}
	for _, ap := range addresses(w) {
		if a := firstCovering(mine[svcnetv1alpha1.AnnouncementModeL2], ap, w); a != nil {
			l2p := ap
			l2p.announcement = a
			l2p.candidates = candidates(w, a, ap.services)
			l2p.ready = readyOf(w.nodes, l2p.candidates)
			p.l2 = append(p.l2, l2p)
		}
		if a := firstCovering(mine[svcnetv1alpha1.AnnouncementModeBGP], ap, w); a != nil {
			bp := ap
			bp.announcement = a
			bp.candidates = candidates(w, a, ap.services)
			if slices.Contains(bp.candidates, w.node) {
				p.bgp = append(p.bgp, bp)
			}
		}
	}
	return p
}

func findNode(nodes []*corev1.Node, name string) *corev1.Node {
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// addresses groups the LoadBalancer Services by address (shared
// addresses have several), in address order.
func addresses(w world) []addrPlan {
	byAddr := map[netip.Addr]*addrPlan{}
	for _, svc := range w.services {
		if !w.serve.Serves(svc) {
			continue
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			a, err := netip.ParseAddr(ing.IP)
			if err != nil {
				continue
			}
			a = a.Unmap()
			ap := byAddr[a]
			if ap == nil {
				ap = &addrPlan{addr: a}
				byAddr[a] = ap
			}
			ap.services = append(ap.services, client.ObjectKeyFromObject(svc))
		}
	}
	out := make([]addrPlan, 0, len(byAddr))
	for _, ap := range byAddr {
		slices.SortFunc(ap.services, func(a, b types.NamespacedName) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
		out = append(out, *ap)
	}
	slices.SortFunc(out, func(a, b addrPlan) int { return a.addr.Compare(b.addr) })
	return out
}

// firstCovering is the first (by name) of anns that covers the address of
// every one of its Services.
func firstCovering(anns []*announcementpolicy.Announcement, ap addrPlan, w world) *announcementpolicy.Announcement {
	var best *announcementpolicy.Announcement
	for _, a := range anns {
		covers := true
		for _, key := range ap.services {
			svc := w.service(key)
			if svc == nil || !a.Covers(svc, ap.addr, w.pools) {
				covers = false
				break
			}
		}
		if covers && (best == nil || cmp.Compare(a.Name, best.Name) < 0) {
			best = a
		}
	}
	return best
}

// candidates are the nodes a selects that have, for each Local Service on
// the address, an endpoint kube-proxy would use (ready, else serving and
// terminating), sorted.
func candidates(w world, a *announcementpolicy.Announcement, services []types.NamespacedName) []string {
	var out []string
	for _, n := range w.nodes {
		if !a.SelectsNode(n) {
			continue
		}
		ok := true
		for _, key := range services {
			svc := w.service(key)
			if svc != nil && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && !hasLocalEndpoint(w.slices[key], n.Name) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}

// readyOf are the nodes of names whose Node is Ready, sorted as names.
func readyOf(nodes []*corev1.Node, names []string) []string {
	var out []string
	for _, name := range names {
		if n := findNode(nodes, name); n != nil && nodeReady(n) {
			out = append(out, name)
		}
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// internalIPs are the nodes' InternalIPs, by node name.
func internalIPs(nodes []*corev1.Node) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, n := range nodes {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				out[n.Name] = append(out[n.Name], ip.Unmap())
			}
		}
	}
	return out
}

func hasLocalEndpoint(slices []*discoveryv1.EndpointSlice, node string) bool {
	for _, s := range slices {
		for _, ep := range s.Endpoints {
			if ep.NodeName == nil || *ep.NodeName != node {
				continue
			}
			c := ep.Conditions
			ready := c.Ready == nil || *c.Ready
			servingTerminating := c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating
			if ready || servingTerminating {
				return true
			}
		}
	}
	return false
}

// segmentWants are the wants of the segment on an interface whose
// announcements are anns.
func (p plan) segmentWants(anns []string) []l2.Want {
	var out []l2.Want
	for _, ap := range p.l2 {
		if slices.Contains(anns, ap.announcement.Name) {
			out = append(out, l2.Want{Addr: ap.addr, Announcement: ap.announcement.Name, Candidates: ap.candidates, Election: ap.announcement.Election, Ready: ap.ready})
		}
	}
	return out
}

// segmentPeers are the InternalIPs of the nodes that are candidates for
// an address of the segment on an interface whose announcements are
// anns: where its UDP liveness path sends.
func (p plan) segmentPeers(anns []string) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, ap := range p.l2 {
		if !slices.Contains(anns, ap.announcement.Name) {
			continue
		}
		for _, c := range ap.candidates {
			if ips, ok := p.internalIPs[c]; ok {
				out[c] = ips
			}
		}
	}
	return out
}
