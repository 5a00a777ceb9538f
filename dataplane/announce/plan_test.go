// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/lbclass"
)

func compiled(t *testing.T, name string, mode svcnetv1alpha1.AnnouncementMode, nodeLabel string) *announcementpolicy.Announcement {
	t.Helper()
	a := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: mode}}
	if nodeLabel != "" {
		a.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{nodeLabel: "yes"}}
	}
	if mode == svcnetv1alpha1.AnnouncementModeBGP {
		a.Spec.BGP = &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: "172.30.0.254", ASN: 64500}}}
	}
	c, err := announcementpolicy.Compile(a)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func lbSvc(name, ip string, local bool) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return s
}

func slice(svc string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x"}, Endpoints: eps}
}

func ep(node string, ready, serving, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)}}
}

func TestMakePlan(t *testing.T) {
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"edge": "yes"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"edge": "yes"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n3"}},
		// Out of every external load balancer: never a candidate, even
		// where a selector matches it.
		{ObjectMeta: metav1.ObjectMeta{Name: "n4", Labels: map[string]string{"edge": "yes", corev1.LabelNodeExcludeBalancers: ""}}},
	}
	pools := announcementpolicy.Pools([]*svcnetv1alpha1.LoadBalancerIPPool{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.240.0/24"}}}})
	services := []*corev1.Service{
		lbSvc("cluster", "192.168.240.1", false),
		lbSvc("local", "192.168.240.2", true),
		lbSvc("outside", "10.1.1.1", false), // in no pool
	}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{
		{Namespace: "default", Name: "local"}: {slice("local", ep("n2", true, true, false), ep("n3", false, true, true), ep("n1", false, false, true))},
	}
	type got struct {
		L2, BGP    map[string][]string // address -> candidates
		Interfaces map[string][]string
		Peers      int
	}
	summarize := func(p plan) got {
		g := got{L2: map[string][]string{}, BGP: map[string][]string{}, Interfaces: p.l2Interfaces, Peers: len(p.peers)}
		for _, ap := range p.l2 {
			g.L2[ap.addr.String()] = ap.candidates
		}
		for _, ap := range p.bgp {
			g.BGP[ap.addr.String()] = ap.candidates
		}
		return g
	}
	tests := map[string]struct {
		node string
		anns []*announcementpolicy.Announcement
		want got
	}{
		"L2 everywhere, from n1: Local candidates are nodes with a ready or serving-terminating endpoint": {
			node: "n1", anns: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", "")},
			want: got{
				L2:         map[string][]string{"192.168.240.1": {"n1", "n2", "n3"}, "192.168.240.2": {"n2", "n3"}},
				BGP:        map[string][]string{},
				Interfaces: map[string][]string{"": {"l2"}},
			},
		},
		"L2 on edge nodes seen from n3, which is not selected: nothing": {
			node: "n3", anns: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", "edge")},
			want: got{L2: map[string][]string{}, BGP: map[string][]string{}, Interfaces: map[string][]string{}},
		},
		"BGP from n1: advertises only what it should attract": {
			node: "n1", anns: []*announcementpolicy.Announcement{compiled(t, "bgp", "BGP", "")},
			want: got{L2: map[string][]string{}, BGP: map[string][]string{"192.168.240.1": {"n1", "n2", "n3"}}, Interfaces: map[string][]string{}, Peers: 1},
		},
		"BGP from n2: the Local Service too": {
			node: "n2", anns: []*announcementpolicy.Announcement{compiled(t, "bgp", "BGP", "")},
			want: got{L2: map[string][]string{}, BGP: map[string][]string{"192.168.240.1": {"n1", "n2", "n3"}, "192.168.240.2": {"n2", "n3"}}, Interfaces: map[string][]string{}, Peers: 1},
		},
		"n4, excluded from external load balancers, announces nothing": {
			node: "n4", anns: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", ""), compiled(t, "bgp", "BGP", "edge")},
			want: got{L2: map[string][]string{}, BGP: map[string][]string{}, Interfaces: map[string][]string{}},
		},
		"a node without its Node object announces nothing": {
			node: "gone", anns: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", ""), compiled(t, "bgp", "BGP", "")},
			want: got{L2: map[string][]string{}, BGP: map[string][]string{}, Interfaces: map[string][]string{}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := makePlan(world{node: tc.node, nodes: nodes, announcements: tc.anns, pools: pools, services: services, slices: slices})
			if diff := cmp.Diff(tc.want, summarize(p)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanFollowsTheServedClasses: the agent announces the addresses of
// the LoadBalancer Services the manager serves, by class, and no other
// implementation's.
func TestPlanFollowsTheServedClasses(t *testing.T) {
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}
	pools := announcementpolicy.Pools([]*svcnetv1alpha1.LoadBalancerIPPool{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.240.0/24"}}}})
	withClass := func(svc *corev1.Service, class string) *corev1.Service {
		svc.Spec.LoadBalancerClass = ptr.To(class)
		return svc
	}
	services := []*corev1.Service{
		lbSvc("plain", "192.168.240.1", false),
		withClass(lbSvc("ours", "192.168.240.2", false), lbclass.Default),
		// Another implementation's, with an address in svcnet's pool.
		withClass(lbSvc("theirs", "192.168.240.3", false), "example.com/lb"),
	}
	tests := map[string]struct {
		serve lbclass.Selection
		want  []string
	}{
		"default: no class and svcnet's": {lbclass.DefaultSelection(), []string{"192.168.240.1", "192.168.240.2"}},
		"class only":                     {lbclass.Selection{Class: lbclass.Default, Only: true}, []string{"192.168.240.2"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := makePlan(world{node: "n1", serve: tc.serve, nodes: nodes, announcements: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", "")},
				pools: pools, services: services, slices: map[types.NamespacedName][]*discoveryv1.EndpointSlice{}})
			var got []string
			for _, ap := range p.l2 {
				got = append(got, ap.addr.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("announced (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanBGPPerAnnouncement: two announcements covering different pools
// advertise to the same router, each address with its own announcement's
// attributes; a peer's nodeSelector keeps other nodes from peering with it.
func TestPlanBGPPerAnnouncement(t *testing.T) {
	nodes := []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "r1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{"rack": "r2"}}},
	}
	bgpAnn := func(name, pool, community string) *announcementpolicy.Announcement {
		a := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{
			Mode:         svcnetv1alpha1.AnnouncementModeBGP,
			PoolSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}},
			BGP: &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512, Communities: []string{community}, Peers: []svcnetv1alpha1.BGPPeer{
				{Address: "172.30.0.254", ASN: 64500},
				{Address: "172.30.1.254", ASN: 64501, NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r2"}}},
			}}}}
		c, err := announcementpolicy.Compile(a)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := func(name, cidr string) *svcnetv1alpha1.LoadBalancerIPPool {
		return &svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name}},
			Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{cidr}}}
	}
	w := world{
		nodes:         nodes,
		announcements: []*announcementpolicy.Announcement{bgpAnn("blue", "blue", "64512:1"), bgpAnn("red", "red", "64512:2")},
		pools:         announcementpolicy.Pools([]*svcnetv1alpha1.LoadBalancerIPPool{pool("blue", "192.168.1.0/24"), pool("red", "192.168.2.0/24")}),
		services:      []*corev1.Service{lbSvc("b", "192.168.1.1", false), lbSvc("r", "192.168.2.1", false)},
	}
	type got struct {
		Communities map[string][]uint32
		Peers       []string
	}
	for node, want := range map[string]got{
		"n1": {Communities: map[string][]uint32{"192.168.1.1": {64512<<16 | 1}, "192.168.2.1": {64512<<16 | 2}}, Peers: []string{"172.30.0.254"}},
		"n2": {Communities: map[string][]uint32{"192.168.1.1": {64512<<16 | 1}, "192.168.2.1": {64512<<16 | 2}}, Peers: []string{"172.30.0.254", "172.30.1.254"}},
	} {
		w.node = node
		p := makePlan(w)
		g := got{Communities: map[string][]uint32{}}
		for _, ap := range p.bgp {
			g.Communities[ap.addr.String()] = ap.announcement.Attributes.Communities
		}
		for _, peer := range p.peers {
			g.Peers = append(g.Peers, peer.Address.String())
		}
		if diff := cmp.Diff(want, g); diff != "" {
			t.Errorf("node %s: plan (-want +got):\n%s", node, diff)
		}
	}
}

// TestPlanSegmentReadyAndPeers: a segment's wants name the candidates
// whose Node is Ready, and its UDP path reaches the candidates'
// InternalIPs, not those of nodes that are no candidate.
func TestPlanSegmentReadyAndPeers(t *testing.T) {
	node := func(name, ip string, ready corev1.ConditionStatus) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeExternalIP, Address: "203.0.113.1"}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		return n
	}
	w := world{
		node: "n1",
		nodes: []*corev1.Node{
			node("n1", "192.168.60.11", corev1.ConditionTrue),
			node("n2", "192.168.60.12", corev1.ConditionFalse),
			node("n3", "192.168.60.13", corev1.ConditionTrue),
			node("n4", "192.168.60.14", ""), // no condition yet: not Ready
		},
		serve:         lbclass.DefaultSelection(),
		announcements: []*announcementpolicy.Announcement{compiled(t, "l2", "L2", "")},
		pools:         announcementpolicy.Pools([]*svcnetv1alpha1.LoadBalancerIPPool{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{"192.168.240.0/24"}}}}),
		services:      []*corev1.Service{lbSvc("local", "192.168.240.2", true)},
		slices: map[types.NamespacedName][]*discoveryv1.EndpointSlice{
			{Namespace: "default", Name: "local"}: {slice("local", ep("n1", true, true, false), ep("n2", true, true, false), ep("n4", true, true, false))},
		},
	}
	p := makePlan(w)
	wants := p.segmentWants([]string{"l2"})
	if len(wants) != 1 {
		t.Fatalf("wants %v, want one", wants)
	}
	if diff := cmp.Diff([]string{"n1", "n2", "n4"}, wants[0].Candidates); diff != "" {
		t.Errorf("candidates (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"n1"}, wants[0].Ready); diff != "" {
		t.Errorf("ready (-want +got):\n%s", diff)
	}
	want := map[string][]netip.Addr{
		"n1": {netip.MustParseAddr("192.168.60.11")}, "n2": {netip.MustParseAddr("192.168.60.12")}, "n4": {netip.MustParseAddr("192.168.60.14")},
	}
	if diff := cmp.Diff(want, p.segmentPeers([]string{"l2"}), cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("peers (-want +got):\n%s", diff)
	}
	if got := p.segmentPeers([]string{"other"}); len(got) != 0 {
		t.Errorf("peers of a segment without the announcement: %v", got)
	}
}
