// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// TestEncode checks the bytes of elements as the kernel stores them: every
// part padded to 4 bytes, ports in network order, numgen's bucket in the
// host's, a range as its first and last address.
func TestEncode(t *testing.T) {
	bucket := func(n uint32) []byte { return binary.NativeEndian.AppendUint32(nil, n) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	dest := []field{fieldAddr, fieldProto, fieldPort}
	cases := map[string]struct {
		fam         family
		fields      []field
		text        string
		key, keyEnd []byte
		wantErr     bool
	}{
		"cluster IP and port": {familyIPv4, dest, "10.96.0.10 . tcp . 80",
			[]byte{10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0}, nil, false},
		"endpoint map key": {familyIPv4, append(dest, fieldBucket), "10.96.0.10 . udp . 53 . 3",
			cat([]byte{10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0}, bucket(3)), nil, false},
		"node port key": {familyIPv4, []field{fieldProto, fieldPort, fieldBucket}, "sctp . 30080 . 0",
			cat([]byte{132, 0, 0, 0, 0x75, 0x80, 0, 0}, bucket(0)), nil, false},
		"endpoint value": {familyIPv4, []field{fieldAddr, fieldPort}, "10.244.1.2 . 8080",
			[]byte{10, 244, 1, 2, 0x1f, 0x90, 0, 0}, nil, false},
		"IPv6 hairpin": {familyIPv6, []field{fieldAddr, fieldAddr}, "fd00::1 . fd00::1",
			cat([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}), nil, false},
		"source range": {familyIPv4, append(dest, fieldAddrRange), "192.168.1.1 . tcp . 443 . 203.0.113.0/25",
			[]byte{192, 168, 1, 1, 6, 0, 0, 0, 1, 187, 0, 0, 203, 0, 113, 0},
			[]byte{192, 168, 1, 1, 6, 0, 0, 0, 1, 187, 0, 0, 203, 0, 113, 127}, false},
		"source address": {familyIPv4, []field{fieldAddrRange}, "203.0.113.9",
			[]byte{203, 0, 113, 9}, []byte{203, 0, 113, 9}, false},
		"IPv4 address in an IPv6 set": {familyIPv6, []field{fieldAddr}, "10.0.0.1", nil, nil, true},
		"too few parts":               {familyIPv4, dest, "10.96.0.10 . tcp", nil, nil, true},
		"unknown protocol":            {familyIPv4, dest, "10.96.0.10 . icmp . 80", nil, nil, true},
		"port out of range":           {familyIPv4, dest, "10.96.0.10 . tcp . 70000", nil, nil, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			key, keyEnd, err := encode(tc.fam, tc.fields, tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.key, key); diff != "" {
				t.Errorf("key (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.keyEnd, keyEnd); diff != "" {
				t.Errorf("key end (-want +got):\n%s", diff)
			}
		})
	}
}

// netlinkFake is knftables' Fake with a netlink element writer whose
// transactions are recorded instead of sent to a kernel.
type netlinkFake struct {
	*knftables.Fake
	nl   *netlinkElements
	runs int
	// batches are the netlink transactions, each as "add <set> <n>",
	// "del <set> <n>" and "flush <set>" per message.
	batches [][]string
}

func newNetlinkFake(t *testing.T) *netlinkFake {
	f := &netlinkFake{Fake: knftables.NewFake(knftables.IPv4Family, TableName)}
	f.nl = newNetlinkElements(familyIPv4, TableName, "")
	f.nl.dial = func(req []netlink.Message) ([]netlink.Message, error) {
		if req == nil {
			return nil, nil
		}
		var batch []string
		for _, m := range req {
			typ := m.Header.Type & 0xff
			if m.Header.Type>>8 != unix.NFNL_SUBSYS_NFTABLES || (typ != unix.NFT_MSG_NEWSETELEM && typ != unix.NFT_MSG_DELSETELEM) {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				t.Fatal(err)
			}
			var set string
			n := 0
			for ad.Next() {
				switch ad.Type() {
				case unix.NFTA_SET_ELEM_LIST_SET:
					set = ad.String()
				case unix.NFTA_SET_ELEM_LIST_ELEMENTS:
					ad.Nested(func(nad *netlink.AttributeDecoder) error {
						for nad.Next() {
							n++
						}
						return nil
					})
				}
			}
			switch {
			case typ == unix.NFT_MSG_NEWSETELEM:
				batch = append(batch, fmt.Sprintf("add %s %d", set, n))
			case n == 0:
				batch = append(batch, "flush "+set)
			default:
				batch = append(batch, fmt.Sprintf("del %s %d", set, n))
			}
		}
		f.batches = append(f.batches, batch)
		return req, nil
	}
	return f
}

func (f *netlinkFake) netlink() *netlinkElements { return f.nl }

func (f *netlinkFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.runs++
	return f.Fake.Run(ctx, tx)
}

// takeBatches returns the netlink transactions since the last call.
func (f *netlinkFake) takeBatches() [][]string {
	b := f.batches
	f.batches = nil
	return b
}

// TestElementsGoOverNetlinkObjectsThroughKnftables checks which way each
// sync writes: a cold sync's objects through knftables and its data
// elements over netlink; an endpoint change over netlink alone, in one
// transaction; a change of endpoint count (a new map and rule) in one
// knftables transaction; a restarted backend's full sync emptying and
// refilling each set it finds in one netlink transaction.
func TestElementsGoOverNetlinkObjectsThroughKnftables(t *testing.T) {
	ctx := context.Background()
	f := newNetlinkFake(t)
	b := NewBackend(corev1.IPv4Protocol, f, Config{})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", "10.244.1.1", "10.244.1.2")})
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "api"}, []*model.ServicePort{port("api", "10.96.0.11", "10.244.2.1", "10.244.2.2", "10.244.2.3")})
	sync := func(step string) {
		t.Helper()
		if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	sync("cold sync")
	if f.runs != 1 || strings.Contains(f.Dump(), "add element") {
		t.Fatalf("cold sync: %d knftables transactions, want 1 without data elements:\n%s", f.runs, f.Dump())
	}
	want := [][]string{{"add cluster-ip-addresses 2", "add cluster-ips 2", "add endpoints-tcp-2 2", "add endpoints-tcp-3 3", "add hairpin 5"}}
	if diff := cmp.Diff(want, f.takeBatches()); diff != "" {
		t.Errorf("cold sync's netlink transactions (-want +got):\n%s", diff)
	}

	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", "10.244.1.1", "10.244.1.9")})
	sync("endpoint change")
	if f.runs != 1 {
		t.Errorf("an endpoint change ran nft (%d knftables transactions in all, want 1)", f.runs)
	}
	want = [][]string{{"del endpoints-tcp-2 1", "del hairpin 1", "add endpoints-tcp-2 1", "add hairpin 1"}}
	if diff := cmp.Diff(want, f.takeBatches()); diff != "" {
		t.Errorf("endpoint change's netlink transactions (-want +got):\n%s", diff)
	}

	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", "10.244.1.1", "10.244.1.9", "10.244.1.3")})
	sync("endpoint count change")
	if got := f.takeBatches(); f.runs != 2 || len(got) != 0 {
		t.Errorf("a change of endpoint count: %d knftables transactions in all and netlink %v; want 2 and none", f.runs, got)
	}
	if dump := f.Dump(); !strings.Contains(dump, "endpoints-tcp-3 { 10.96.0.10 . tcp . 80 . 2 ") || strings.Contains(dump, "endpoints-tcp-2") {
		t.Errorf("the count change did not move web to endpoints-tcp-3 in the knftables transaction:\n%s", dump)
	}

	again := NewBackend(corev1.IPv4Protocol, f, Config{})
	again.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", "10.244.1.1")})
	if _, err := again.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	got := f.takeBatches()
	// Each set the table held is emptied and refilled in the same
	// transaction (the sets no element is wanted in any more emptied
	// only); endpoints-tcp-1 was not in the table.
	want = [][]string{{"flush cluster-ip-addresses", "add cluster-ip-addresses 1", "flush cluster-ips", "add cluster-ips 1", "add endpoints-tcp-1 1", "flush external-ips",
		"flush external-ips-local", "flush firewall-allow", "flush firewall-ips", "flush hairpin", "add hairpin 1",
		"flush no-endpoint-nodeports", "flush no-endpoint-services", "flush no-local-endpoint-nodeports",
		"flush no-local-endpoint-services", "flush nodeport-ips", "flush service-nodeports", "flush service-nodeports-local"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a restarted backend's full sync over the table (-want +got):\n%s", diff)
	}
}

// TestFullSyncChunksOnlyNewSets checks that a cold sync's elements go in
// transactions of bounded size, while a set the table held is emptied
// and refilled in one transaction however large.
func TestFullSyncChunksOnlyNewSets(t *testing.T) {
	defer func(saved int) { maxChunkBytes = saved }(maxChunkBytes)
	maxChunkBytes = 2000
	ctx := context.Background()
	f := newNetlinkFake(t)
	b := NewBackend(corev1.IPv4Protocol, f, Config{})
	var eps []string
	for i := range 100 {
		eps = append(eps, fmt.Sprintf("10.244.1.%d", i+1))
	}
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", eps...)})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	cold := f.takeBatches()
	if len(cold) < 3 {
		t.Fatalf("a cold sync of 200 elements in %d transactions, want them in chunks of about %d bytes", len(cold), maxChunkBytes)
	}
	again := NewBackend(corev1.IPv4Protocol, f, Config{})
	again.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, []*model.ServicePort{port("web", "10.96.0.10", eps...)})
	if _, err := again.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	for _, batch := range f.takeBatches() {
		flushed := map[string]bool{}
		for _, op := range batch {
			fields := strings.Fields(op)
			switch fields[0] {
			case "flush":
				flushed[fields[1]] = true
			case "add":
				if !flushed[fields[1]] {
					t.Errorf("elements of %s added in a transaction apart from its flush: %v", fields[1], batch)
				}
			}
		}
	}
}
