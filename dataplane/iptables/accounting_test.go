// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// allCounters is a node with both of kube-proxy's nfacct counters.
var allCounters = Counters{InvalidDropped: true, LocalhostNodePorts: true}

// The rules the counters change, as kube-proxy writes them.
const (
	invalidDrop        = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"
	invalidDropCounted = "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP"
	localhostNodePort  = "-A KUBE-NODEPORTS -m comment --comment ns/web:http -m tcp -p tcp -d 127.0.0.0/8 --dport 30080 " +
		"-m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-HMALVVKA6APKJPPY"
	nodePortRule = "-A KUBE-NODEPORTS -m comment --comment ns/web:http -m tcp -p tcp --dport 30080 -j KUBE-EXT-HMALVVKA6APKJPPY"
)

func withNodePort(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
}

// nodePortModel is ns/web as a NodePort Service with endpoints, in one
// family.
func nodePortModel(family corev1.IPFamily) *model.Model {
	svc := web(func(s *corev1.Service) {
		withNodePort(s)
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	return model.Build(family, model.Node{Name: node}, []*corev1.Service{svc}, map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "ns", Name: "web"}: {
		slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.2", node)),
		slice("web", "ns", discoveryv1.AddressTypeIPv6, 8080, ready("fd00:244::2", node)),
	}}, model.Options{})
}

// TestCountersOnlyAddTheirMatches renders the same NodePort Service with
// and without each counter, and checks what differs: the INVALID drop
// counts in both families; the localhost NodePort rule exists only in
// IPv4 with localhost NodePorts, and only with its counter (kube-proxy
// writes no such rule otherwise, the node port's own rule covers
// 127.0.0.0/8 too).
func TestCountersOnlyAddTheirMatches(t *testing.T) {
	for name, tc := range map[string]struct {
		family               corev1.IPFamily
		noLocalhostNodePorts bool
		counters             Counters
		removed, added       []string
	}{
		"IPv4, both": {family: corev1.IPv4Protocol, counters: allCounters,
			removed: []string{invalidDrop}, added: []string{invalidDropCounted, localhostNodePort}},
		"IPv4, only the INVALID one": {family: corev1.IPv4Protocol, counters: Counters{InvalidDropped: true},
			removed: []string{invalidDrop}, added: []string{invalidDropCounted}},
		"IPv4, only the localhost one": {family: corev1.IPv4Protocol, counters: Counters{LocalhostNodePorts: true},
			added: []string{localhostNodePort}},
		"IPv4 without localhost NodePorts": {family: corev1.IPv4Protocol, noLocalhostNodePorts: true, counters: allCounters,
			removed: []string{invalidDrop}, added: []string{invalidDropCounted}},
		"IPv6": {family: corev1.IPv6Protocol, counters: allCounters,
			removed: []string{invalidDrop}, added: []string{invalidDropCounted}},
	} {
		t.Run(name, func(t *testing.T) {
			m := nodePortModel(tc.family)
			cfg := Config{NoLocalhostNodePorts: tc.noLocalhostNodePorts}
			without := strings.Split(string(Render(m, cfg).RestoreText(nil, nil)), "\n")
			cfg.Counters = tc.counters
			with := strings.Split(string(Render(m, cfg).RestoreText(nil, nil)), "\n")
			if diff := cmp.Diff(tc.removed, missingFrom(with, without)); diff != "" {
				t.Errorf("rules the counters removed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.added, missingFrom(without, with)); diff != "" {
				t.Errorf("rules the counters added (-want +got):\n%s", diff)
			}
			if i := slices.Index(with, localhostNodePort); i >= 0 && (i+1 >= len(with) || with[i+1] != nodePortRule) {
				t.Errorf("the localhost rule is not right before the node port's own:\n%s", strings.Join(with, "\n"))
			}
		})
	}
}

// missingFrom is the lines of b that a lacks, in b's order.
func missingFrom(a, b []string) []string {
	var out []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, l)
		}
	}
	return out
}

// fakeAccounting records which counters it was asked to ensure; those in
// fail fail.
type fakeAccounting struct {
	ensured []string
	fail    map[string]bool
}

func (f *fakeAccounting) Ensure(name string) error {
	f.ensured = append(f.ensured, name)
	if f.fail[name] {
		return errors.New("nfacct: operation not permitted")
	}
	return nil
}

// TestBackendEnsuresCountersOnFullSyncs follows kube-proxy: the counters
// are ensured before each full sync and not on partial ones, and a
// counter that cannot be created drops its match (not the rule, not the
// sync) until a full sync finds it again.
func TestBackendEnsuresCountersOnFullSyncs(t *testing.T) {
	ctx := context.Background()
	acct := &fakeAccounting{fail: map[string]bool{}}
	fake := NewFake()
	b := NewBackend(corev1.IPv4Protocol, fake, Config{}, WithAccounting(acct))
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, nodePortModel(corev1.IPv4Protocol).Ports)
	if len(acct.ensured) != 0 {
		t.Fatalf("counters ensured before any sync: %v", acct.ensured)
	}
	syncNow := func(wantFull bool) string {
		t.Helper()
		acct.ensured = nil
		res, err := b.Sync(ctx, dataplane.Node{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Full != wantFull {
			t.Fatalf("sync full=%t, want %t", res.Full, wantFull)
		}
		return fake.Dump()
	}
	both := []string{CounterInvalidDropped, CounterLocalhostNodePorts}

	dump := syncNow(true)
	if diff := cmp.Diff(both, acct.ensured); diff != "" {
		t.Errorf("counters ensured by the first sync (-want +got):\n%s", diff)
	}
	for _, want := range []string{invalidDropCounted, localhostNodePort, nodePortRule} {
		if !strings.Contains(dump, want+"\n") {
			t.Errorf("no %q after the first sync:\n%s", want, dump)
		}
	}

	b.SetService(types.NamespacedName{Namespace: "ns", Name: "other"}, model.BuildService(corev1.IPv4Protocol, model.Node{Name: node}, web(func(s *corev1.Service) { s.Name = "other" }), nil, model.Options{}))
	syncNow(false)
	if len(acct.ensured) != 0 {
		t.Errorf("a partial sync ensured %v, want nothing", acct.ensured)
	}
	if dump := fake.Dump(); !strings.Contains(dump, localhostNodePort+"\n") {
		t.Errorf("a partial sync lost the localhost rule:\n%s", dump)
	}

	acct.fail[CounterLocalhostNodePorts] = true
	b.ForceFull()
	dump = syncNow(true)
	if diff := cmp.Diff(both, acct.ensured); diff != "" {
		t.Errorf("counters ensured by a forced sync (-want +got):\n%s", diff)
	}
	if strings.Contains(dump, CounterLocalhostNodePorts) {
		t.Errorf("the rules count into a counter that could not be created:\n%s", dump)
	}
	for _, want := range []string{invalidDropCounted, nodePortRule} {
		if !strings.Contains(dump, want+"\n") {
			t.Errorf("no %q with the localhost counter missing:\n%s", want, dump)
		}
	}

	acct.fail = map[string]bool{}
	b.ForceFull()
	if dump := syncNow(true); !strings.Contains(dump, localhostNodePort+"\n") {
		t.Errorf("the localhost rule did not come back with its counter:\n%s", dump)
	}
}

func TestNoAccountingNoCounting(t *testing.T) {
	fake := NewFake()
	b := NewBackend(corev1.IPv4Protocol, fake, Config{Counters: allCounters})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, nodePortModel(corev1.IPv4Protocol).Ports)
	if _, err := b.Sync(context.Background(), dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	if dump := fake.Dump(); strings.Contains(dump, "nfacct") || !strings.Contains(dump, invalidDrop+"\n") {
		t.Errorf("a backend without accounting counts:\n%s", dump)
	}
}

// TestLiberalConntrackWritesNoInvalidDrop: with nf_conntrack_tcp_be_liberal
// on, kube-proxy writes no INVALID drop, counted or not; the rest of the
// ruleset is the same.
func TestLiberalConntrackWritesNoInvalidDrop(t *testing.T) {
	m := nodePortModel(corev1.IPv4Protocol)
	strict := strings.Split(string(Render(m, Config{Counters: allCounters}).RestoreText(nil, nil)), "\n")
	liberal := strings.Split(string(Render(m, Config{Counters: allCounters, ConntrackTCPLiberal: true}).RestoreText(nil, nil)), "\n")
	if !slices.Contains(strict, invalidDropCounted) {
		t.Fatalf("the strict ruleset lacks %q", invalidDropCounted)
	}
	want := slices.DeleteFunc(slices.Clone(strict), func(l string) bool { return l == invalidDropCounted })
	if !slices.Equal(liberal, want) {
		t.Errorf("with tcp_be_liberal, want the ruleset without the INVALID drop;\ngot:\n%s\nwant:\n%s", strings.Join(liberal, "\n"), strings.Join(want, "\n"))
	}
}
