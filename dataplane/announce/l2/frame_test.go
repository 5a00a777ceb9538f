// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package l2

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHeartbeatRoundTrip(t *testing.T) {
	big := &Heartbeat{Node: "node-1", Incarnation: 42, Seq: 7, Ready: true, Leaving: true, Announcements: []string{"l2", "edge"}}
	for i := range 600 { // several frames at a 1500-byte MTU
		big.Claims = append(big.Claims, netip.AddrFrom4([4]byte{192, 168, byte(i / 256), byte(i)}))
	}
	big.Claims = append(big.Claims, netip.MustParseAddr("2001:db8::1"))
	for name, h := range map[string]*Heartbeat{
		"empty": {Node: "n", Incarnation: 1},
		"big":   big,
	} {
		t.Run(name, func(t *testing.T) {
			frames, err := h.encode(1500)
			if err != nil {
				t.Fatal(err)
			}
			var a assembler
			var got *Heartbeat
			// Out of order, with a duplicate.
			order := []int{}
			for i := len(frames) - 1; i >= 0; i-- {
				order = append(order, i)
			}
			order = append(order, 0)
			for _, i := range order {
				if len(frames[i]) > 1500 {
					t.Fatalf("frame %d is %d bytes", i, len(frames[i]))
				}
				hb, err := a.add("aa", frames[i])
				if err != nil {
					t.Fatal(err)
				}
				if hb != nil {
					got = hb
				}
			}
			if diff := cmp.Diff(h, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	var a assembler
	if _, err := a.add("aa", []byte("garbage that is long enough to have a header")); err == nil {
		t.Error("garbage parsed as a heartbeat")
	}
}
