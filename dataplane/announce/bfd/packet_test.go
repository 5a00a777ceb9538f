// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bfd

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// upPacket is a packet as FRR's bfdd sends it once Up, polling for its
// 300 ms: version 1, state Up, P bit, multiplier 3, length 24,
// discriminators 1 and 2, 300000 µs each way, no echo.
const upPacket = "20e0031800000001000000020004 93e000 0493e0 00000000"

func TestParse(t *testing.T) {
	cases := map[string]struct {
		hex     string
		want    ControlPacket
		wantErr bool
	}{
		"up with poll": {
			hex: upPacket,
			want: ControlPacket{State: StateUp, Poll: true, DetectMult: 3, MyDisc: 1, YourDisc: 2,
				DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond},
		},
		"down without remote, detection expired": {
			hex:  "214003180000000700000000000f4240000f424000000000",
			want: ControlPacket{Diag: DiagDetectionExpired, State: StateDown, DetectMult: 3, MyDisc: 7, DesiredMinTx: time.Second, RequiredMinRx: time.Second},
		},
		"trailing bytes beyond the length field are ignored": {
			hex:  "214003180000000700000000000f4240000f424000000000ffff",
			want: ControlPacket{Diag: DiagDetectionExpired, State: StateDown, DetectMult: 3, MyDisc: 7, DesiredMinTx: time.Second, RequiredMinRx: time.Second},
		},
		"short":                       {hex: "20e00318000000010000000200", wantErr: true},
		"version 0":                   {hex: "00e0031800000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"length over what came":       {hex: "20e0031c00000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"length under 24":             {hex: "20e0031400000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"zero multiplier":             {hex: "20e0001800000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"multipoint":                  {hex: "20e1031800000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"zero my discriminator":       {hex: "20e0031800000000000000020004 93e000 0493e0 00000000", wantErr: true},
		"zero your discriminator, Up": {hex: "20e0031800000001000000000004 93e000 0493e0 00000000", wantErr: true},
		"poll and final":              {hex: "20f0031800000001000000020004 93e000 0493e0 00000000", wantErr: true},
		"auth bit, length 24":         {hex: "20e4031800000001000000020004 93e000 0493e0 00000000", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := mustHex(t, tc.hex)
			got, err := Parse(b)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse() error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestMarshal(t *testing.T) {
	p := ControlPacket{State: StateUp, Poll: true, DetectMult: 3, MyDisc: 1, YourDisc: 2,
		DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}
	if diff := cmp.Diff(mustHex(t, upPacket), p.Marshal()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	p.Poll, p.Final, p.Diag = false, true, DiagNeighborDown
	back, err := Parse(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, back); diff != "" {
		t.Errorf("round trip (-want +got)\n%s", diff)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	clean := make([]byte, 0, len(s))
	for i := range len(s) {
		if s[i] != ' ' {
			clean = append(clean, s[i])
		}
	}
	b, err := hex.DecodeString(string(clean))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
