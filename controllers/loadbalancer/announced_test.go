// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package loadbalancer

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

var announcedEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) metav1.MicroTime {
	return metav1.NewMicroTime(announcedEpoch.Add(time.Duration(s) * time.Second))
}

var webRef = []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}

func report(node string, mutate func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec)) svcnetv1alpha1.LoadBalancerNodeAnnouncement {
	r := svcnetv1alpha1.LoadBalancerNodeAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: node}}
	mutate(&r.Spec)
	return r
}

func answers(addr, iface string, since int, refs ...svcnetv1alpha1.ServiceReference) func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
	return func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
		proto := announcementpolicy.L2ProtocolOf(netip.MustParseAddr(addr))
		if refs == nil {
			refs = webRef
		}
		s.Addresses = append(s.Addresses, svcnetv1alpha1.L2AnsweredAddress{Address: addr, Interface: iface, Protocol: proto, Services: refs, Since: at(since)})
	}
}

func withdrew(addr string, since int) func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
	return func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
		s.Withdrawn = append(s.Withdrawn, svcnetv1alpha1.L2WithdrawnAddress{Address: addr, Services: webRef, Since: at(since)})
	}
}

func holds(addr, iface string) func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
	return func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
		s.HeldBack = append(s.HeldBack, svcnetv1alpha1.L2HeldBackAddress{Address: addr, Interface: iface, Services: webRef, Since: at(1)})
	}
}

func both(fs ...func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec)) func(*svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
	return func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
		for _, f := range fs {
			f(s)
		}
	}
}

// TestAnnouncedCondition: the manager's composition of the condition the
// owners of each address used to write themselves.
func TestAnnouncedCondition(t *testing.T) {
	const heldNote1 = "held back from 192.168.240.1 by node-b (on eth0), node-c (on eth0): hearing no L2 peer while other candidates are Ready; are the heartbeats filtered?"
	const noCandidate1 = "no node may announce 192.168.240.1 (none selected, or none with a ready endpoint under externalTrafficPolicy Local)"
	trueCond := func(msg string) *metav1.Condition {
		return &metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Reason: svcnetv1alpha1.ServiceReasonL2, Message: msg, ObservedGeneration: 3}
	}
	falseCond := func(msg string) *metav1.Condition {
		return &metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionFalse, Reason: svcnetv1alpha1.ServiceReasonNoCandidate, Message: msg, ObservedGeneration: 3}
	}
	cases := map[string]struct {
		ingress []string
		current *metav1.Condition
		reports []svcnetv1alpha1.LoadBalancerNodeAnnouncement
		want    *metav1.Condition // nil: nothing to write
	}{
		"no report, no condition": {
			ingress: []string{"192.168.240.1"},
		},
		"one node answers": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{report("node-a", answers("192.168.240.1", "eth0", 1))},
			want:    trueCond("192.168.240.1 answered by node-a (ARP on eth0)"),
		},
		"takeover: node-b's later entry wins over dead node-a's stale one": {
			ingress: []string{"192.168.240.1"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0)"),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", answers("192.168.240.1", "eth0", 1)),
				report("node-b", answers("192.168.240.1", "eth1", 5)),
			},
			want: trueCond("192.168.240.1 answered by node-b (ARP on eth1)"),
		},
		"takeover in the same microsecond: the one taking over from the other wins": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", answers("192.168.240.1", "eth0", 5)),
				report("node-b", func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
					answers("192.168.240.1", "eth1", 5)(s)
					s.Addresses[0].Takeover = &svcnetv1alpha1.L2Takeover{FromNode: "node-a", Reason: svcnetv1alpha1.TakeoverReasonReleased}
				}),
			},
			want: trueCond("192.168.240.1 answered by node-b (ARP on eth1)"),
		},
		"handover in flight: the address no node reports keeps its part": {
			ingress: []string{"192.168.240.1", "192.168.240.2"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0); 192.168.240.2 answered by node-a (ARP on eth0)"),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{report("node-a", answers("192.168.240.2", "eth0", 1))},
			want:    trueCond("192.168.240.1 answered by node-a (ARP on eth0); 192.168.240.2 answered by node-a (ARP on eth0)"),
		},
		"release with no candidate: NoCandidate": {
			ingress: []string{"192.168.240.1"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0)"),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{report("node-a", withdrew("192.168.240.1", 7))},
			want:    falseCond(noCandidate1),
		},
		"release of one of two addresses: the other's part stays": {
			ingress: []string{"192.168.240.1", "2001:db8::1"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0); 2001:db8::1 answered by node-b (NDP on eth0)"),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", withdrew("192.168.240.1", 7)),
				report("node-b", answers("2001:db8::1", "eth0", 2)),
			},
			want: trueCond("2001:db8::1 answered by node-b (NDP on eth0)"),
		},
		"a withdrawal older than another node's answer is over": {
			ingress: []string{"192.168.240.1"},
			current: falseCond(noCandidate1),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", withdrew("192.168.240.1", 7)),
				report("node-b", answers("192.168.240.1", "eth0", 9)),
			},
			want: trueCond("192.168.240.1 answered by node-b (ARP on eth0)"),
		},
		"a takeover stands against the withdrawal of the node it took the address from, even a later one": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", withdrew("192.168.240.1", 9)),
				report("node-b", func(s *svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec) {
					answers("192.168.240.1", "eth0", 8)(s)
					s.Addresses[0].Takeover = &svcnetv1alpha1.L2Takeover{FromNode: "node-a", Reason: svcnetv1alpha1.TakeoverReasonReleased}
				}),
			},
			want: trueCond("192.168.240.1 answered by node-b (ARP on eth0)"),
		},
		"a node's answer older than another's withdrawal is over": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", answers("192.168.240.1", "eth0", 3)),
				report("node-b", withdrew("192.168.240.1", 9)),
			},
			want: falseCond(noCandidate1),
		},
		"an address the Service does not hold is ignored, and its old part dropped": {
			ingress: []string{"192.168.240.2"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0); 192.168.240.2 answered by node-a (ARP on eth0)"),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{report("node-b", answers("192.168.240.1", "eth0", 9))},
			want:    trueCond("192.168.240.2 answered by node-a (ARP on eth0)"),
		},
		"a report not naming the Service is ignored": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", answers("192.168.240.1", "eth0", 1, svcnetv1alpha1.ServiceReference{Namespace: "other", Name: "web"})),
			},
		},
		"filtered heartbeats, the first Ready node answers: True, the others' holding back noted": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-a", answers("192.168.240.1", "eth0", 1)),
				report("node-c", holds("192.168.240.1", "eth0")),
				report("node-b", holds("192.168.240.1", "eth0")),
			},
			want: trueCond("192.168.240.1 answered by node-a (ARP on eth0); " + heldNote1),
		},
		"the note does not stay once nobody holds back": {
			ingress: []string{"192.168.240.1"},
			current: trueCond("192.168.240.1 answered by node-a (ARP on eth0); " + heldNote1),
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{report("node-a", answers("192.168.240.1", "eth0", 1))},
			want:    trueCond("192.168.240.1 answered by node-a (ARP on eth0)"),
		},
		"filtered heartbeats and no node answers: PeersUnheard": {
			ingress: []string{"192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-b", holds("192.168.240.1", "eth0")),
				report("node-c", holds("192.168.240.1", "eth0")),
			},
			want: &metav1.Condition{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionFalse, Reason: svcnetv1alpha1.ServiceReasonPeersUnheard,
				Message: heldNote1, ObservedGeneration: 3},
		},
		"two addresses on two nodes, sorted": {
			ingress: []string{"192.168.240.2", "192.168.240.1"},
			reports: []svcnetv1alpha1.LoadBalancerNodeAnnouncement{
				report("node-b", answers("192.168.240.2", "eth0", 1)),
				report("node-a", both(answers("192.168.240.1", "eth0", 1), withdrew("192.168.240.9", 1))),
			},
			want: trueCond("192.168.240.1 answered by node-a (ARP on eth0); 192.168.240.2 answered by node-b (ARP on eth0)"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Generation: 3}}
			for _, ip := range tc.ingress {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
			if tc.current != nil {
				svc.Status.Conditions = []metav1.Condition{*tc.current}
			}
			got, ok := announcedCondition(svc, tc.reports)
			var gotp *metav1.Condition
			if ok {
				gotp = &got
			}
			if diff := cmp.Diff(tc.want, gotp); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
