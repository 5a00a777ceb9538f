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
//
// A peer with BFD gets a BFD session (package bfd) beside its BGP one,
// from the same source address; when that session misses its detection
// time the neighbor is reset at once, rather than after the hold time.
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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/svcnet-io/svcnet/dataplane/announce/bfd"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Config is what a Speaker needs.
type Config struct {
	// NetNS, when set, is the node's network namespace: the speaker's
	// event loop runs on a thread inside it, so its listener is there,
	// and every peer is passive (GoBGP dials from goroutines of its own,
	// which would leave from the agent's namespace). A router that keeps
	// a restarting peer's routes waits for that peer to connect, so with
	// NetNS graceful restart ends only when the restart time does: run
	// the agent inside the node's namespace for BGP.
	NetNS string
	Log   logr.Logger
	// OnBFDChange, when set, hears of every state change of a peer's BFD
	// session (for metrics); it must not block.
	OnBFDChange bfd.ChangeFunc
}

// Speaker advertises a node's addresses to its peers.
type Speaker struct {
	cfg Config

	mu       sync.Mutex
	srv      *server.BgpServer
	peers    map[netip.Addr]announcementpolicy.Peer
	paths    map[netip.Prefix]announcementpolicy.PathAttributes
	started  bool
	routerID netip.Addr
	// bfd runs the BFD sessions of the peers that have BFD.
	bfd *bfd.Manager
	// export is the export policy in force (nil before the first).
	export exportPolicy
}

// Path is one route to advertise (an address, or the aggregate that
// holds it), with its announcement's attributes, to its announcement's
// peers.
type Path struct {
	Prefix     netip.Prefix
	Attributes announcementpolicy.PathAttributes
	// Peers are the peers that may hear it; others do not.
	Peers []netip.Addr
}

// New returns a speaker that starts GoBGP on its first Sync with peers.
func New(cfg Config) *Speaker {
	s := &Speaker{cfg: cfg, peers: map[netip.Addr]announcementpolicy.Peer{}, paths: map[netip.Prefix]announcementpolicy.PathAttributes{}}
	s.bfd = bfd.NewManager(bfd.Options{NetNS: cfg.NetNS, Log: cfg.Log.WithName("bfd"), OnChange: s.bfdChanged})
	return s
}

// Sync makes the speaker advertise exactly paths to exactly peers, as
// routerID: new and changed paths first, then peers added, changed
// (re-created) or removed, then paths withdrawn. A new router ID restarts
// every session.
func (s *Speaker) Sync(ctx context.Context, routerID netip.Addr, peers []announcementpolicy.Peer, paths []Path) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started && routerID != s.routerID {
		s.cfg.Log.Info("Restarting BGP speaker with a new router ID", "from", s.routerID, "to", routerID)
		s.stop(ctx)
	}
	if !s.started {
		if len(peers) == 0 {
			return nil
		}
		if err := s.start(ctx, routerID, peers); err != nil {
			return err
		}
	}
	want := map[netip.Prefix]announcementpolicy.PathAttributes{}
	for _, p := range paths {
		want[p.Prefix] = p.Attributes
	}
	peerAddrs := make([]netip.Addr, 0, len(peers))
	for _, p := range peers {
		peerAddrs = append(peerAddrs, p.Address)
	}
	// The policy first, so that no path reaches a peer it is not for.
	policyChanged, err := s.syncExportPolicy(ctx, exportPolicyOf(paths, peerAddrs))
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Prefix.Compare) {
		// Adding a path again replaces it, attributes and all.
		if have, ok := s.paths[a]; !ok || !have.Equal(want[a]) {
			errs = append(errs, s.addPath(ctx, a, want[a]))
		}
	}
	errs = append(errs, s.syncPeers(ctx, peers))
	for _, a := range slices.SortedFunc(maps.Keys(s.paths), netip.Prefix.Compare) {
		if _, ok := want[a]; !ok {
			errs = append(errs, s.deletePath(ctx, a))
		}
	}
	if policyChanged {
		s.resendAll(ctx)
	}
	return errors.Join(errs...)
}

// start runs GoBGP: its event loop inside the node's namespace, a
// listener on port 179 when some peer is passive.
func (s *Speaker) start(ctx context.Context, routerID netip.Addr, peers []announcementpolicy.Peer) error {
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
		Asn: peers[0].LocalASN, RouterId: routerID.String(), ListenPort: listen,
	}})
	if err != nil {
		return fmt.Errorf("starting BGP: %w", err)
	}
	s.started, s.routerID = true, routerID
	s.cfg.Log.Info("Started BGP speaker", "routerID", routerID, "listenPort", listen)
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
		if w, ok := want[addr]; !ok || withoutBFD(w) != withoutBFD(have) {
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
			// A change of BFD settings alone keeps the BGP session.
			s.peers[addr] = p
			continue
		}
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			errs = append(errs, fmt.Errorf("adding BGP peer %s: %w", addr, err))
			continue
		}
		s.peers[addr] = p
		s.cfg.Log.Info("Added BGP peer", "peer", addr, "asn", p.ASN, "localASN", p.LocalASN, "holdTime", p.HoldTime, "passive", p.Passive,
			"password", p.PasswordSecret != "", "ebgpMultiHop", p.EBGPMultiHop, "sourceAddress", p.SourceAddress, "bfd", p.BFD.Enabled())
	}
	errs = append(errs, s.syncBFD())
	return errors.Join(errs...)
}

// withoutBFD is p without its BFD settings, which GoBGP does not see.
func withoutBFD(p announcementpolicy.Peer) announcementpolicy.Peer {
	p.BFD = announcementpolicy.BFD{}
	return p
}

// syncBFD runs a BFD session to each peer that asks for one, from the
// session's source address.
func (s *Speaker) syncBFD() error {
	var peers []bfd.Peer
	for _, p := range s.peers {
		if !p.BFD.Enabled() {
			continue
		}
		peers = append(peers, bfd.Peer{Addr: p.Address, Source: p.SourceAddress, Config: bfd.Config{
			DesiredMinTx: p.BFD.TransmitInterval, RequiredMinRx: p.BFD.ReceiveInterval, DetectMult: p.BFD.DetectMultiplier,
		}})
	}
	return s.bfd.Sync(peers)
}

// bfdChanged resets the BGP session of a peer whose BFD session failed
// (bfd.Change.Failure), so that it drops the peer's routes at once
// rather than after the hold time; the router, running BFD too, drops
// this node's.
func (s *Speaker) bfdChanged(c bfd.Change) {
	if s.cfg.OnBFDChange != nil {
		s.cfg.OnBFDChange(c)
	}
	if !c.Failure() {
		return
	}
	// Not on the BFD session's goroutine: Sync may hold the lock while
	// it stops sessions.
	go s.resetPeer(c.Peer, c.Diag)
}

func (s *Speaker) resetPeer(peer netip.Addr, diag bfd.Diag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.peers[peer]; !ok || !s.started {
		return
	}
	err := s.srv.ResetPeer(context.Background(), &api.ResetPeerRequest{Address: peer.String(), Communication: "BFD session down: " + diag.String()})
	if err != nil {
		s.cfg.Log.Error(err, "Resetting the BGP session after BFD declared the peer down", "peer", peer)
		return
	}
	s.cfg.Log.Info("Reset the BGP session: BFD declared the peer down", "peer", peer, "diag", diag.String())
}

// BFDSessions tells, per peer with BFD, the state of its BFD session.
func (s *Speaker) BFDSessions() map[netip.Addr]bfd.State { return s.bfd.States() }

// apiPeer is GoBGP's configuration of a peer: the family of its address,
// graceful restart with the restart and forwarding bits set, its TCP-MD5
// password, TTL and source address.
func apiPeer(p announcementpolicy.Peer) *api.Peer {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	if p.Address.Is6() {
		family.Afi = api.Family_AFI_IP6
	}
	gr := p.GracefulRestartTime > 0
	out := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, LocalAsn: p.LocalASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(p.HoldTime.Seconds()), KeepaliveInterval: uint64(max(1, p.KeepaliveTime.Seconds())), ConnectRetry: 1,
			// After a reset (BFD found the peer dead), try again at once
			// rather than after GoBGP's 30s.
			IdleHoldTimeAfterReset: 1,
		}},
		Transport: &api.Transport{PassiveMode: p.Passive, RemotePort: uint32(p.Port)},
		AfiSafis: []*api.AfiSafi{{
			Config:            &api.AfiSafiConfig{Family: family, Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}},
		}},
	}
	if p.SourceAddress.IsValid() {
		out.Transport.LocalAddress = p.SourceAddress.String()
	}
	if p.EBGPMultiHop > 0 {
		out.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultiHop)}
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

// pathOf is the route to a, with the node as next hop and attrs.
func pathOf(a netip.Prefix, attrs announcementpolicy.PathAttributes) (*api.Path, error) {
	family := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	nexthop := "0.0.0.0"
	if a.Addr().Is6() {
		family.Afi, nexthop = api.Family_AFI_IP6, "::"
	}
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: a.Addr().String(), PrefixLen: uint32(a.Bits())})
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
	pattrs := []*anypb.Any{origin, nh}
	extra, err := attributesOf(attrs)
	if err != nil {
		return nil, err
	}
	return &api.Path{Family: family, Nlri: nlri, Pattrs: append(pattrs, extra...)}, nil
}

// attributesOf are GoBGP's attributes for attrs. LOCAL_PREF goes with
// every path; GoBGP sends it to iBGP peers only, as RFC 4271 says.
func attributesOf(attrs announcementpolicy.PathAttributes) ([]*anypb.Any, error) {
	var out []*anypb.Any
	add := func(m proto.Message) error {
		a, err := anypb.New(m)
		out = append(out, a)
		return err
	}
	if len(attrs.Communities) > 0 {
		if err := add(&api.CommunitiesAttribute{Communities: attrs.Communities}); err != nil {
			return nil, err
		}
	}
	if len(attrs.LargeCommunities) > 0 {
		lc := make([]*api.LargeCommunity, 0, len(attrs.LargeCommunities))
		for _, c := range attrs.LargeCommunities {
			lc = append(lc, &api.LargeCommunity{GlobalAdmin: c.Global, LocalData1: c.Local1, LocalData2: c.Local2})
		}
		if err := add(&api.LargeCommunitiesAttribute{Communities: lc}); err != nil {
			return nil, err
		}
	}
	if attrs.HasLocalPreference {
		if err := add(&api.LocalPrefAttribute{LocalPref: attrs.LocalPreference}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Speaker) addPath(ctx context.Context, a netip.Prefix, attrs announcementpolicy.PathAttributes) error {
	p, err := pathOf(a, attrs)
	if err == nil {
		_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: p})
	}
	if err != nil {
		return fmt.Errorf("advertising %s: %w", a, err)
	}
	s.paths[a] = attrs
	return nil
}

func (s *Speaker) deletePath(ctx context.Context, a netip.Prefix) error {
	p, err := pathOf(a, s.paths[a])
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
	s.stop(ctx)
}

func (s *Speaker) stop(ctx context.Context) {
	if s.started {
		_ = s.srv.StopBgp(ctx, &api.StopBgpRequest{})
		s.started = false
		clear(s.peers)
		clear(s.paths)
		s.export = nil
		_ = s.bfd.Sync(nil)
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
