// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	api "github.com/osrg/gobgp/v3/api"

	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
)

func TestAPIPeerGracefulRestart(t *testing.T) {
	p := announcementpolicy.Peer{Address: netip.MustParseAddr("192.0.2.1"), ASN: 64500, LocalASN: 64512, Port: 179,
		HoldTime: 3 * time.Second, KeepaliveTime: time.Second, GracefulRestartTime: 120 * time.Second}
	got := apiPeer(p)
	gr := got.GetGracefulRestart()
	// Restarting with forwarding kept (the node's rules stay), and no
	// notification bit: a hold-timer expiry must withdraw.
	if !gr.GetEnabled() || !gr.GetLocalRestarting() || gr.GetNotificationEnabled() || gr.GetRestartTime() != 120 {
		t.Errorf("graceful restart = %+v", gr)
	}
	if !got.GetAfiSafis()[0].GetMpGracefulRestart().GetConfig().GetEnabled() {
		t.Error("the family's graceful restart is off")
	}
	if h, k := got.GetTimers().GetConfig().GetHoldTime(), got.GetTimers().GetConfig().GetKeepaliveInterval(); h != 3 || k != 1 {
		t.Errorf("timers hold %d keepalive %d, want 3 and 1", h, k)
	}
	if f := got.GetAfiSafis()[0].GetConfig().GetFamily(); f.GetAfi() != api.Family_AFI_IP {
		t.Errorf("family %v for an IPv4 peer", f)
	}
	p.GracefulRestartTime = 0
	if apiPeer(p).GetGracefulRestart() != nil {
		t.Error("gracefulRestartTime 0s leaves graceful restart on")
	}
	p.Address = netip.MustParseAddr("2001:db8::1")
	if f := apiPeer(p).GetAfiSafis()[0].GetConfig().GetFamily(); f.GetAfi() != api.Family_AFI_IP6 {
		t.Errorf("family %v for an IPv6 peer", f)
	}
}

func TestPathOf(t *testing.T) {
	for _, a := range []string{"192.168.240.1/32", "2001:db8::7/128", "192.168.240.0/24", "2001:db8::/64"} {
		pfx := netip.MustParsePrefix(a)
		p, err := pathOf(pfx, announcementpolicy.PathAttributes{})
		if err != nil {
			t.Fatal(err)
		}
		var nlri api.IPAddressPrefix
		if err := p.GetNlri().UnmarshalTo(&nlri); err != nil {
			t.Fatal(err)
		}
		if nlri.GetPrefix() != pfx.Addr().String() || int(nlri.GetPrefixLen()) != pfx.Bits() {
			t.Errorf("%s advertised as %s/%d", a, nlri.GetPrefix(), nlri.GetPrefixLen())
		}
		if want := map[bool]api.Family_Afi{true: api.Family_AFI_IP, false: api.Family_AFI_IP6}[pfx.Addr().Is4()]; p.GetFamily().GetAfi() != want {
			t.Errorf("%s in family %v", a, p.GetFamily())
		}
		if len(p.GetPattrs()) != 2 {
			t.Errorf("%s has %d attributes, want ORIGIN and NEXT_HOP only", a, len(p.GetPattrs()))
		}
	}
}

func TestPathOfAttributes(t *testing.T) {
	attrs := announcementpolicy.PathAttributes{
		Communities:      []uint32{64500<<16 | 100, 0xFFFFFF01},
		LargeCommunities: []announcementpolicy.LargeCommunity{{Global: 4200000000, Local1: 1, Local2: 2}},
		LocalPreference:  250, HasLocalPreference: true,
	}
	p, err := pathOf(netip.MustParsePrefix("192.168.240.1/32"), attrs)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Communities []uint32
		Large       [][3]uint32
		LocalPref   uint32
	}
	var g got
	for _, a := range p.GetPattrs() {
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *api.CommunitiesAttribute:
			g.Communities = m.GetCommunities()
		case *api.LargeCommunitiesAttribute:
			for _, c := range m.GetCommunities() {
				g.Large = append(g.Large, [3]uint32{c.GetGlobalAdmin(), c.GetLocalData1(), c.GetLocalData2()})
			}
		case *api.LocalPrefAttribute:
			g.LocalPref = m.GetLocalPref()
		}
	}
	want := got{Communities: []uint32{64500<<16 | 100, 0xFFFFFF01}, Large: [][3]uint32{{4200000000, 1, 2}}, LocalPref: 250}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
}

func TestAPIPeerSession(t *testing.T) {
	base := announcementpolicy.Peer{Address: netip.MustParseAddr("192.0.2.1"), ASN: 64500, LocalASN: 64512, Port: 179,
		HoldTime: 90 * time.Second, KeepaliveTime: 30 * time.Second}
	got := apiPeer(base)
	if got.GetConf().GetAuthPassword() != "" || got.GetEbgpMultihop().GetEnabled() || got.GetTransport().GetLocalAddress() != "" {
		t.Errorf("a peer without password, multihop or source address got %v", got)
	}
	p := base
	p.Password, p.EBGPMultiHop, p.SourceAddress = "s3cret", 4, netip.MustParseAddr("192.0.2.10")
	got = apiPeer(p)
	if pw := got.GetConf().GetAuthPassword(); pw != "s3cret" {
		t.Errorf("auth password %q, want s3cret", pw)
	}
	if m := got.GetEbgpMultihop(); !m.GetEnabled() || m.GetMultihopTtl() != 4 {
		t.Errorf("ebgp multihop %v, want enabled with TTL 4", m)
	}
	if la := got.GetTransport().GetLocalAddress(); la != "192.0.2.10" {
		t.Errorf("local address %q, want 192.0.2.10", la)
	}
}
