// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

var reportEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// lbService is a Service holding addrs.
func lbService(name string, addrs ...string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
	for _, a := range addrs {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a})
	}
	return svc
}

// newTestReportWriter is node-2's writer on a fake API server holding
// objs and node-2's Node, with a fake clock at reportEpoch.
func newTestReportWriter(t *testing.T, objs ...client.Object) (*reportWriter, client.Client, *events.FakeRecorder) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2", UID: "node-2-uid"}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, node)...).Build()
	rec := events.NewFakeRecorder(10)
	w := newReportWriter(c, c, c, rec, "node-2", logr.Discard())
	w.clock = clocktesting.NewFakePassiveClock(reportEpoch)
	return w, c, rec
}

func readReport(t *testing.T, c client.Client) *svcnetv1alpha1.LoadBalancerNodeAnnouncement {
	t.Helper()
	var r svcnetv1alpha1.LoadBalancerNodeAnnouncement
	if err := c.Get(context.Background(), client.ObjectKey{Name: "node-2"}, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestReportTakeoverAndHandover: a takeover is reported with where the
// address came from, owned by the Node, with its Announced Event; a
// release while another node may take the address drops it from the
// report and reports no withdrawal (that node reports its answer).
func TestReportTakeoverAndHandover(t *testing.T) {
	ctx := context.Background()
	addr := netip.MustParseAddr("192.168.240.1")
	w, c, rec := newTestReportWriter(t, lbService("web", "192.168.240.1"))
	owned := true
	w.owns = func(netip.Addr) bool { return owned }
	web := types.NamespacedName{Namespace: "default", Name: "web"}
	w.setPlan(plan{l2: []addrPlan{{addr: addr, services: []types.NamespacedName{web}, candidates: []string{"node-2", "node-3"}}}})

	at := reportEpoch.Add(1500 * time.Microsecond)
	w.apply(l2Change{addr: addr, iface: "eth0", taken: true, at: at, from: "node-1", reason: l2.MovedPeerLost, gap: 612400 * time.Microsecond})
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.recordAnnounced(ctx)
	got := readReport(t, c)
	want := svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Addresses: []svcnetv1alpha1.L2AnsweredAddress{{
		Address: "192.168.240.1", Interface: "eth0", Protocol: svcnetv1alpha1.L2ProtocolARP,
		Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}, Since: metav1.NewMicroTime(at),
		Takeover: &svcnetv1alpha1.L2Takeover{FromNode: "node-1", Reason: svcnetv1alpha1.TakeoverReasonPeerLost, UnansweredFor: metav1.Duration{Duration: 613 * time.Millisecond}},
	}}}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("report after the takeover (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-2", UID: "node-2-uid"}}, got.OwnerReferences); diff != "" {
		t.Errorf("owner (-want +got):\n%s", diff)
	}
	select {
	case e := <-rec.Events:
		const wantEvent = "Normal Announced 192.168.240.1 answered by node-2 (ARP on eth0), taken over from node-1, whose heartbeats stopped: unanswered for at most 613ms"
		if e != wantEvent {
			t.Errorf("Event %q, want %q", e, wantEvent)
		}
	default:
		t.Error("no Announced Event")
	}

	owned = false
	w.apply(l2Change{addr: addr, iface: "eth0"})
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readReport(t, c); len(got.Spec.Addresses) != 0 || len(got.Spec.Withdrawn) != 0 {
		t.Errorf("report after handing the address over: %+v, want it empty", got.Spec)
	}
}

// TestReportReleaseOfAnAddressNoLongerSelected: when the announcement
// stops selecting the node that answers for an address, its letting go is
// reported as a withdrawal (no other node may be there to take it); an
// address it did not answer for reports nothing; the withdrawal goes once
// no Service holds the address.
func TestReportReleaseOfAnAddressNoLongerSelected(t *testing.T) {
	ctx := context.Background()
	owned, other := netip.MustParseAddr("192.168.240.1"), netip.MustParseAddr("192.168.240.2")
	web := lbService("web", "192.168.240.1")
	w, c, _ := newTestReportWriter(t, web, lbService("db", "192.168.240.2"))
	w.owns = func(a netip.Addr) bool { return a == owned }
	w.setPlan(plan{l2: []addrPlan{
		{addr: owned, services: []types.NamespacedName{{Namespace: "default", Name: "web"}}, candidates: []string{"node-2"}},
		{addr: other, services: []types.NamespacedName{{Namespace: "default", Name: "db"}}, candidates: []string{"node-1", "node-2"}},
	}})
	w.apply(l2Change{addr: owned, iface: "eth0", taken: true, at: reportEpoch})
	w.setPlan(plan{})
	w.apply(l2Change{addr: owned, iface: "eth0"})
	w.apply(l2Change{addr: other, iface: "eth0"})
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Withdrawn: []svcnetv1alpha1.L2WithdrawnAddress{{
		Address: "192.168.240.1", Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}, Since: metav1.NewMicroTime(reportEpoch),
	}}}
	if diff := cmp.Diff(want, readReport(t, c).Spec); diff != "" {
		t.Errorf("report after node-2 let go of its address, no longer selected (-want +got):\n%s", diff)
	}
	if len(w.left) != 0 {
		t.Errorf("addresses kept after their release was reported: %v", w.left)
	}

	if err := c.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readReport(t, c).Spec; len(got.Withdrawn) != 0 {
		t.Errorf("withdrawn after the Service holding it was deleted: %+v, want none", got.Withdrawn)
	}
}

// TestReportFirstWriteClearsAnEarlierRun: a restarted agent's first write
// says what this run answers for, not what the previous one did.
func TestReportFirstWriteClearsAnEarlierRun(t *testing.T) {
	stale := &svcnetv1alpha1.LoadBalancerNodeAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "node-2"},
		Spec: svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{Addresses: []svcnetv1alpha1.L2AnsweredAddress{{
			Address: "192.168.240.1", Interface: "eth0", Protocol: svcnetv1alpha1.L2ProtocolARP,
			Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}}, Since: metav1.NewMicroTime(reportEpoch),
		}}}}
	w, c, _ := newTestReportWriter(t, stale)
	if err := w.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readReport(t, c); len(got.Spec.Addresses) != 0 {
		t.Errorf("addresses after the first write: %+v, want none", got.Spec.Addresses)
	}
}

// TestReportHeldBack: addresses a segment holds back (it hears no peer
// while other candidates are Ready) are in the report while it does,
// with one Warning Event on the Node when it starts and one Normal Event
// when it stops.
func TestReportHeldBack(t *testing.T) {
	ctx := context.Background()
	addr := netip.MustParseAddr("192.168.240.1")
	w, c, rec := newTestReportWriter(t, lbService("web", "192.168.240.1"))
	w.livenessPort = 7947
	web := types.NamespacedName{Namespace: "default", Name: "web"}
	w.setPlan(plan{l2: []addrPlan{{addr: addr, services: []types.NamespacedName{web}, candidates: []string{"node-1", "node-2"}}}})

	w.heldBack("eth0", []netip.Addr{addr})
	w.heldBack("eth0", []netip.Addr{addr}) // the same again: no second Event
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.recordHeld(ctx)
	want := svcnetv1alpha1.LoadBalancerNodeAnnouncementSpec{HeldBack: []svcnetv1alpha1.L2HeldBackAddress{{
		Address: "192.168.240.1", Interface: "eth0", Services: []svcnetv1alpha1.ServiceReference{{Namespace: "default", Name: "web"}},
		Since: metav1.NewMicroTime(reportEpoch),
	}}}
	if diff := cmp.Diff(want, readReport(t, c).Spec); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	wantEvent := "Warning L2PeersUnheard node node-2 hears no L2 peer on eth0, neither by heartbeat frames (EtherType 0x88B5) nor by UDP to port 7947, " +
		"while other candidates are Ready: it does not answer for 192.168.240.1 and leaves them to the first Ready candidate; let the heartbeats pass between the nodes"
	if diff := cmp.Diff([]string{wantEvent}, drain(rec)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	w.heldBack("eth0", nil)
	if err := w.flush(ctx); err != nil {
		t.Fatal(err)
	}
	w.recordHeld(ctx)
	if got := readReport(t, c).Spec.HeldBack; len(got) > 0 {
		t.Errorf("still reported held back: %v", got)
	}
	if diff := cmp.Diff([]string{"Normal L2HoldBackEnded node node-2 holds back no address on eth0 any more: it hears an L2 peer, no other candidate is Ready, or it is not answering there at all"}, drain(rec)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// drain takes the Events recorded so far.
func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
