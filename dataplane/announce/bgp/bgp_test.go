// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package bgp

import (
	"net/netip"
	"testing"
	"time"

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
	for _, a := range []string{"192.168.240.1", "2001:db8::7"} {
		p, err := pathOf(netip.MustParseAddr(a))
		if err != nil {
			t.Fatal(err)
		}
		var nlri api.IPAddressPrefix
		if err := p.GetNlri().UnmarshalTo(&nlri); err != nil {
			t.Fatal(err)
		}
		if nlri.GetPrefix() != a || int(nlri.GetPrefixLen()) != netip.MustParseAddr(a).BitLen() {
			t.Errorf("%s advertised as %s/%d", a, nlri.GetPrefix(), nlri.GetPrefixLen())
		}
	}
}
