// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package bgp is a node's BGP speaker: GoBGP run as a library (no gRPC
// API listening), one neighbor per peer the node's announcements give it,
// advertising the LoadBalancer addresses the node should attract as /32
// and /128 routes with itself as next hop.
//
// Graceful restart (RFC 4724) is on for every peer with a restart time:
// the speaker always opens as a restarting speaker with its forwarding
// state kept (a restarted agent's node kept its rules), so the router
// holds the routes it had while the agent was gone, waits for this
// speaker's End-of-RIB and only then drops what was not advertised again.
// Every path is added before the first neighbor, so that End-of-RIB lists
// them all. The notification bit (RFC 8538) is off: a hold-timer expiry
// (a dead node) withdraws the node's routes at once.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Config is what a Speaker needs.
type Config struct {
	// RouterID is the node's IPv4 address.
	RouterID netip.Addr
	// NetNS, when set, is the node's network namespace: the speaker's
	// event loop runs on a thread inside it, so its listener is there,
	// and every peer is passive (GoBGP dials from goroutines of its own,
	// which would leave from the agent's namespace). A router that keeps
	// a restarting peer's routes waits for that peer to connect, so with
	// NetNS graceful restart ends only when the restart time does: run
	// the agent inside the node's namespace for BGP.
	NetNS string
	Log   logr.Logger
}

// Speaker advertises a node's addresses to its peers.
type Speaker struct {
	cfg Config

	mu      sync.Mutex
	srv     *server.BgpServer
	peers   map[netip.Addr]announcementpolicy.Peer
	paths   map[netip.Addr]bool
	started bool
}

// New returns a speaker that starts GoBGP on its first Sync with peers.
func New(cfg Config) *Speaker {
	return &Speaker{cfg: cfg, peers: map[netip.Addr]announcementpolicy.Peer{}, paths: map[netip.Addr]bool{}}
}

// Sync makes the speaker advertise exactly addrs to exactly peers: new
// paths first, then peers added, changed (re-created) or removed, then
// paths withdrawn.
func (s *Speaker) Sync(ctx context.Context, peers []announcementpolicy.Peer, addrs []netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		if len(peers) == 0 {
			return nil
		}
		if err := s.start(ctx, peers); err != nil {
			return err
		}
	}
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	var errs []error
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if !s.paths[a] {
			errs = append(errs, s.addPath(ctx, a))
		}
	}
	errs = append(errs, s.syncPeers(ctx, peers))
	for _, a := range slices.SortedFunc(maps.Keys(s.paths), netip.Addr.Compare) {
		if !want[a] {
			errs = append(errs, s.deletePath(ctx, a))
		}
	}
	return errors.Join(errs...)
}

// start runs GoBGP: its event loop inside the node's namespace, a
// listener on port 179 when some peer is passive.
func (s *Speaker) start(ctx context.Context, peers []announcementpolicy.Peer) error {
	if s.srv == nil {
		srv := server.NewBgpServer(server.LoggerOption(&logger{log: s.cfg.Log.WithName("gobgp")}))
		go func() {
			_ = netns.Do(s.cfg.NetNS, func() error {
				srv.Serve()
				return nil
			})
		}()
		s.srv = srv
	}
	listen := int32(-1)
	for _, p := range peers {
		if p.Passive || s.cfg.NetNS != "" {
			listen = int32(announcementpolicy.DefaultBGPPort)
		}
	}
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: peers[0].LocalASN, RouterId: s.cfg.RouterID.String(), ListenPort: listen,
	}})
	if err != nil {
		return fmt.Errorf("starting BGP: %w", err)
	}
	s.started = true
	s.cfg.Log.Info("Started BGP speaker", "routerID", s.cfg.RouterID, "listenPort", listen)
	return nil
}

func (s *Speaker) syncPeers(ctx context.Context, peers []announcementpolicy.Peer) error {
	want := map[netip.Addr]announcementpolicy.Peer{}
	for _, p := range peers {
		if s.cfg.NetNS != "" {
			p.Passive = true
		}
		want[p.Address] = p
	}
	var errs []error
	for addr, have := range s.peers {
		if w, ok := want[addr]; !ok || w != have {
			if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
				errs = append(errs, fmt.Errorf("removing BGP peer %s: %w", addr, err))
				continue
			}
			delete(s.peers, addr)
			s.cfg.Log.Info("Removed BGP peer", "peer", addr)
		}
	}
	for addr, p := range want {
		if _, ok := s.peers[addr]; ok {
			continue
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			errs = append(errs, fmt.Errorf("adding BGP peer %s: %w", addr, err))
			continue
		}
		s.peers[addr] = p
		s.cfg.Log.Info("Added BGP peer", "peer", addr, "asn", p.ASN, "localASN", p.LocalASN, "holdTime", p.HoldTime, "passive", p.Passive)
	}
	return errors.Join(errs...)
}

// apiPeer is GoBGP's configuration of a peer: the family of its address,
// graceful restart with the restart and forwarding bits set.
func apiPeer(p announcementpolicy.Peer) *api.Peer {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if p.Address.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	gr := p.GracefulRestartTime > 0
	out := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, LocalAsn: p.LocalASN},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(p.HoldTime.Seconds()), KeepaliveInterval: uint64(max(1, p.KeepaliveTime.Seconds())), ConnectRetry: 1,
		}},
		Transport: &api.Transport{PassiveMode: p.Passive, RemotePort: uint32(p.Port)},
		AfiSafis: []*api.AfiSafi{{
			Config:            &api.AfiSafiConfig{Family: family, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}},
		}},
	}
	if gr {
		out.GracefulRestart = &api.GracefulRestart{
			Enabled: true, RestartTime: uint32(p.GracefulRestartTime.Seconds()), LocalRestarting: true,
			// Without the router's End-of-RIB, advertise after this long.
			DeferralTime: 5,
		}
	}
	return out
}

func pathOf(a netip.Addr) (*api.Path, error) {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	nexthop := "0.0.0.0"
	if a.Is6() {
		family.Afi, nexthop = api.Family_AFI_IP6, "::"
	}
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: a.String(), PrefixLen: uint32(a.BitLen())})
	if err != nil {
		return nil, err
	}
	origin, err := anypb.New(&api.OriginAttribute{Origin: 0})
	if err != nil {
		return nil, err
	}
	nh, err := anypb.New(&api.NextHopAttribute{NextHop: nexthop})
	if err != nil {
		return nil, err
	}
	return &api.Path{Family: family, Nlri: nlri, Pattrs: []*anypb.Any{origin, nh}}, nil
}

func (s *Speaker) addPath(ctx context.Context, a netip.Addr) error {
	p, err := pathOf(a)
	if err == nil {
		_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p})
	}
	if err != nil {
		return fmt.Errorf("advertising %s: %w", a, err)
	}
	s.paths[a] = true
	return nil
}

func (s *Speaker) deletePath(ctx context.Context, a netip.Addr) error {
	p, err := pathOf(a)
	if err == nil {
		err = s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: p.Family, Path: p})
	}
	if err != nil {
		return fmt.Errorf("withdrawing %s: %w", a, err)
	}
	delete(s.paths, a)
	return nil
}

// Sessions tells, per peer, whether its session is established.
func (s *Speaker) Sessions(ctx context.Context) map[netip.Addr]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[netip.Addr]bool{}
	if !s.started {
		return out
	}
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if a, err := netip.ParseAddr(p.GetConf().GetNeighborAddress()); err == nil {
			out[a] = p.GetState().GetSessionState() == api.PeerState_ESTABLISHED
		}
	})
	return out
}

// Withdraw ends every session with a Cease notification, so the peers
// drop this node's routes at once. An agent that stops does not call it:
// its process ends the TCP connections without a notification, and the
// peers keep its routes for the graceful restart time.
func (s *Speaker) Withdraw(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		_ = s.srv.StopBgp(ctx, &api.StopBgpRequest{})
		s.started = false
		clear(s.peers)
		clear(s.paths)
	}
}

// logger passes GoBGP's log lines to logr: errors and warnings as they
// are, info at verbosity 2, debug at 5.
type logger struct {
	log   logr.Logger
	level gobgplog.LogLevel
}

func fields(f gobgplog.Fields) []any {
	out := make([]any, 0, 2*len(f))
	for _, k := range slices.Sorted(maps.Keys(f)) {
		out = append(out, k, f[k])
	}
	return out
}

func (l *logger) Panic(msg string, f gobgplog.Fields) { l.log.Error(nil, msg, fields(f)...) }
func (l *logger) Fatal(msg string, f gobgplog.Fields) { l.log.Error(nil, msg, fields(f)...) }
func (l *logger) Error(msg string, f gobgplog.Fields) { l.log.Error(nil, msg, fields(f)...) }
func (l *logger) Warn(msg string, f gobgplog.Fields)  { l.log.Info(msg, fields(f)...) }
func (l *logger) Info(msg string, f gobgplog.Fields)  { l.log.V(2).Info(msg, fields(f)...) }
func (l *logger) Debug(msg string, f gobgplog.Fields) { l.log.V(5).Info(msg, fields(f)...) }
func (l *logger) SetLevel(level gobgplog.LogLevel)    { l.level = level }
func (l *logger) GetLevel() gobgplog.LogLevel         { return gobgplog.DebugLevel }
