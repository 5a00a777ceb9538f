// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package announcementpolicy holds the policy of LoadBalancerAnnouncements
// that the manager and the agents must apply alike: which pools, nodes and
// Services an announcement covers, which announcements are accepted (valid
// and not overlapping an accepted one), and the order in which nodes claim
// an address. It is pure: inputs are API objects, outputs are decisions.
// The manager's announcement controller writes Judge's verdicts into the
// status; the agents' speakers use Compile and Rank.
package announcementpolicy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/svcnet-io/svcnet/allocator/lbipam"
	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
)

// Defaults of a BGP peer's settings.
const (
	DefaultBGPPort             = 179
	DefaultHoldTime            = 90 * time.Second
	DefaultGracefulRestartTime = 120 * time.Second
	// DefaultPasswordKey is the key of a passwordSecretRef's Secret that
	// holds the password when the ref names none.
	DefaultPasswordKey = "password"
)

// Peer is a BGP peer with its defaults filled in.
type Peer struct {
	Address netip.Addr
	ASN     uint32
	// LocalASN is the AS the node speaks as to this peer.
	LocalASN            uint32
	Port                uint16
	HoldTime            time.Duration
	KeepaliveTime       time.Duration
	GracefulRestartTime time.Duration
	Passive             bool
	// PasswordSecret and PasswordKey name the Secret key (in the agents'
	// namespace) holding the TCP-MD5 password; PasswordSecret is empty
	// for none. Password is that password once the agent has read it.
	PasswordSecret, PasswordKey string
	Password                    string
	// EBGPMultiHop is the TTL of the session's packets; 0 for the
	// default, a directly connected peer.
	EBGPMultiHop uint8
	// SourceAddress is the local address of the session; invalid for the
	// kernel's choice.
	SourceAddress netip.Addr
	// BFD is the BFD session run beside the BGP one; zero for none.
	BFD BFD
}

// BFD is a peer's BFD settings with defaults filled in; the zero value
// is no BFD.
type BFD struct {
	ReceiveInterval, TransmitInterval time.Duration
	DetectMultiplier                  uint8
}

// Enabled tells whether the peer runs BFD.
func (b BFD) Enabled() bool { return b.DetectMultiplier != 0 }

// The defaults of a peer's bfd, as MetalLB's BFDProfile's, and its bounds.
const (
	DefaultBFDInterval         = 300 * time.Millisecond
	DefaultBFDDetectMultiplier = 3
	MinBFDInterval             = 10 * time.Millisecond
	MaxBFDInterval             = 60 * time.Second
)

// Announcement is a LoadBalancerAnnouncement with its selectors parsed.
type Announcement struct {
	Name       string
	Mode       svcnetv1alpha1.AnnouncementMode
	Interfaces []string
	// Election is how the nodes of an L2 announcement choose the one
	// that answers for an address (Rank); never empty.
	Election svcnetv1alpha1.L2NodeElection
	Peers    []Peer
	// Attributes are the path attributes of the routes to the addresses
	// a BGP announcement covers.
	Attributes PathAttributes
	// AggregationLength and AggregationLengthV6 are the prefix lengths of
	// those routes (RoutePrefix); 32 and 128 unless aggregated.
	AggregationLength, AggregationLengthV6 int
	// Created orders announcements by seniority.
	Created metav1.Time

	pools, services, nodes labels.Selector
	// peerNodes are the nodeSelectors of Peers, by address.
	peerNodes map[netip.Addr]labels.Selector
}

// Compile parses an announcement's selectors and fills its defaults; the
// error says what is wrong with it.
func Compile(a *svcnetv1alpha1.LoadBalancerAnnouncement) (*Announcement, error) {
	out := &Announcement{Name: a.Name, Mode: a.Spec.Mode, Interfaces: a.Spec.Interfaces, Election: a.Spec.NodeElection, Created: a.CreationTimestamp,
		AggregationLength: 32, AggregationLengthV6: 128}
	if out.Election == "" {
		out.Election = svcnetv1alpha1.L2NodeElectionRendezvous
	}
	var errs []error
	var err error
	if out.pools, err = selector(a.Spec.PoolSelector); err != nil {
		errs = append(errs, fmt.Errorf("poolSelector: %w", err))
	}
	if out.services, err = selector(a.Spec.ServiceSelector); err != nil {
		errs = append(errs, fmt.Errorf("serviceSelector: %w", err))
	}
	if out.nodes, err = selector(a.Spec.NodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("nodeSelector: %w", err))
	}
	switch a.Spec.Mode {
	case svcnetv1alpha1.AnnouncementModeL2:
		if a.Spec.BGP != nil {
			errs = append(errs, errors.New("bgp is not allowed in mode L2"))
		}
	case svcnetv1alpha1.AnnouncementModeBGP:
		peers, peerNodes, err := compilePeers(a.Spec.BGP)
		if err != nil {
			errs = append(errs, err)
		}
		out.Peers, out.peerNodes = peers, peerNodes
		if a.Spec.BGP != nil {
			if out.Attributes, err = compileAttributes(a.Spec.BGP); err != nil {
				errs = append(errs, err)
			}
			if out.AggregationLength, out.AggregationLengthV6, err = compileAggregation(a.Spec.BGP); err != nil {
				errs = append(errs, err)
			}
		}
		if len(a.Spec.Interfaces) > 0 {
			errs = append(errs, errors.New("interfaces apply to mode L2 only"))
		}
	default:
		errs = append(errs, fmt.Errorf("mode %q is not L2 or BGP", a.Spec.Mode))
	}
	return out, errors.Join(errs...)
}

func selector(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

func compilePeers(b *svcnetv1alpha1.BGPAnnouncement) ([]Peer, map[netip.Addr]labels.Selector, error) {
	if b == nil {
		return nil, nil, errors.New("mode BGP needs bgp with localASN and peers")
	}
	if len(b.Peers) == 0 {
		return nil, nil, errors.New("bgp.peers must list at least one peer")
	}
	if b.LocalASN < 1 || b.LocalASN > 1<<32-1 {
		return nil, nil, fmt.Errorf("bgp.localASN %d is out of range 1-4294967295", b.LocalASN)
	}
	var errs []error
	var out []Peer
	nodes := map[netip.Addr]labels.Selector{}
	for i, p := range b.Peers {
		peer, err := compilePeer(p, uint32(b.LocalASN))
		if err == nil {
			var sel labels.Selector
			if sel, err = selector(p.NodeSelector); err != nil {
				err = fmt.Errorf("nodeSelector: %w", err)
			}
			nodes[peer.Address] = sel
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp.peers[%d]: %w", i, err))
			continue
		}
		if slices.ContainsFunc(out, func(q Peer) bool { return q.Address == peer.Address }) {
			errs = append(errs, fmt.Errorf("bgp.peers[%d]: peer %s is listed twice", i, peer.Address))
			continue
		}
		out = append(out, peer)
	}
	return out, nodes, errors.Join(errs...)
}

func compilePeer(p svcnetv1alpha1.BGPPeer, localASN uint32) (Peer, error) {
	addr, err := netip.ParseAddr(p.Address)
	if err != nil {
		return Peer{}, fmt.Errorf("address: %w", err)
	}
	if p.ASN < 1 || p.ASN > 1<<32-1 {
		return Peer{}, fmt.Errorf("asn %d is out of range 1-4294967295", p.ASN)
	}
	peer := Peer{
		Address: addr.Unmap(), ASN: uint32(p.ASN), LocalASN: localASN, Port: DefaultBGPPort,
		HoldTime: DefaultHoldTime, GracefulRestartTime: DefaultGracefulRestartTime, Passive: p.Passive,
	}
	if p.Port != 0 {
		peer.Port = uint16(p.Port)
	}
	if p.HoldTime != nil {
		peer.HoldTime = p.HoldTime.Duration
	}
	if peer.HoldTime < 3*time.Second {
		return Peer{}, fmt.Errorf("holdTime %s is under 3s", peer.HoldTime)
	}
	peer.KeepaliveTime = peer.HoldTime / 3
	if p.KeepaliveTime != nil {
		peer.KeepaliveTime = p.KeepaliveTime.Duration
	}
	if peer.KeepaliveTime <= 0 || peer.KeepaliveTime > peer.HoldTime {
		return Peer{}, fmt.Errorf("keepaliveTime %s must be positive and at most holdTime %s", peer.KeepaliveTime, peer.HoldTime)
	}
	if p.GracefulRestartTime != nil {
		peer.GracefulRestartTime = p.GracefulRestartTime.Duration
	}
	if peer.GracefulRestartTime < 0 || peer.GracefulRestartTime > 4095*time.Second {
		return Peer{}, fmt.Errorf("gracefulRestartTime %s is out of range 0s-4095s", peer.GracefulRestartTime)
	}
	if err := compileSession(p, &peer); err != nil {
		return Peer{}, err
	}
	return peer, nil
}

// compileSession fills the peer's password reference, TTL and source
// address.
func compileSession(p svcnetv1alpha1.BGPPeer, peer *Peer) error {
	if ref := p.PasswordSecretRef; ref != nil {
		if ref.Name == "" {
			return errors.New("passwordSecretRef.name must name a Secret")
		}
		peer.PasswordSecret, peer.PasswordKey = ref.Name, cmp.Or(ref.Key, DefaultPasswordKey)
	}
	if p.EBGPMultiHop != 0 {
		if p.EBGPMultiHop < 2 || p.EBGPMultiHop > 255 {
			return fmt.Errorf("ebgpMultiHop %d is out of range 2-255", p.EBGPMultiHop)
		}
		if peer.ASN == peer.LocalASN {
			return fmt.Errorf("ebgpMultiHop applies to eBGP peers only, and asn %d is localASN", peer.ASN)
		}
		peer.EBGPMultiHop = uint8(p.EBGPMultiHop)
	}
	if p.BFD != nil {
		b, err := compileBFD(p.BFD)
		if err != nil {
			return err
		}
		if peer.EBGPMultiHop != 0 {
			return errors.New("bfd is single-hop (RFC 5881) and cannot be used with ebgpMultiHop")
		}
		peer.BFD = b
	}
	if p.SourceAddress != "" {
		src, err := netip.ParseAddr(p.SourceAddress)
		if err != nil {
			return fmt.Errorf("sourceAddress: %w", err)
		}
		if src = src.Unmap(); src.Is4() != peer.Address.Is4() {
			return fmt.Errorf("sourceAddress %s is not of the family of address %s", src, peer.Address)
		}
		peer.SourceAddress = src
	}
	return nil
}

func compileBFD(b *svcnetv1alpha1.BGPPeerBFD) (BFD, error) {
	out := BFD{ReceiveInterval: DefaultBFDInterval, TransmitInterval: DefaultBFDInterval, DetectMultiplier: DefaultBFDDetectMultiplier}
	if b.ReceiveInterval != nil {
		out.ReceiveInterval = b.ReceiveInterval.Duration
	}
	if b.TransmitInterval != nil {
		out.TransmitInterval = b.TransmitInterval.Duration
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"receiveInterval", out.ReceiveInterval}, {"transmitInterval", out.TransmitInterval}} {
		if d.d < MinBFDInterval || d.d > MaxBFDInterval {
			return BFD{}, fmt.Errorf("bfd.%s %s is out of range %s-%s", d.name, d.d, MinBFDInterval, MaxBFDInterval)
		}
	}
	if m := b.DetectMultiplier; m != 0 {
		if m < 2 || m > 255 {
			return BFD{}, fmt.Errorf("bfd.detectMultiplier %d is out of range 2-255", m)
		}
		out.DetectMultiplier = uint8(m)
	}
	return out, nil
}

// PeersOf are the peers a node the announcement selects opens sessions
// with: those whose nodeSelector matches it.
func (a *Announcement) PeersOf(node *corev1.Node) []Peer {
	var out []Peer
	for _, p := range a.Peers {
		if sel, ok := a.peerNodes[p.Address]; !ok || sel.Matches(labels.Set(node.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

// SelectsPool tells whether the announcement covers a pool's addresses.
func (a *Announcement) SelectsPool(pool *svcnetv1alpha1.LoadBalancerIPPool) bool {
	return a.pools.Matches(labels.Set(pool.Labels))
}

// SelectsNode tells whether a node may announce for it: its nodeSelector
// matches the node, and the node does not carry the label
// node.kubernetes.io/exclude-from-external-load-balancers (whatever its
// value), which keeps a node out of every external load balancer, as
// Kubernetes' service controller and MetalLB honour it.
func (a *Announcement) SelectsNode(node *corev1.Node) bool {
	if _, excluded := node.Labels[corev1.LabelNodeExcludeBalancers]; excluded {
		return false
	}
	return a.nodes.Matches(labels.Set(node.Labels))
}

// SelectsService tells whether it covers a Service.
func (a *Announcement) SelectsService(svc *corev1.Service) bool {
	return a.services.Matches(labels.Set(svc.Labels))
}

// Pool is a LoadBalancerIPPool's addresses, as the rules need them.
type Pool struct {
	Pool   *svcnetv1alpha1.LoadBalancerIPPool
	Ranges []lbipam.Range
}

// Pools parses the pools' ranges; a pool whose spec cannot be parsed
// keeps the ranges that can.
func Pools(pools []*svcnetv1alpha1.LoadBalancerIPPool) []Pool {
	out := make([]Pool, 0, len(pools))
	for _, p := range pools {
		pairs := make([][2]string, 0, len(p.Spec.Ranges))
		for _, r := range p.Spec.Ranges {
			pairs = append(pairs, [2]string{r.Start, r.End})
		}
		ranges, _ := lbipam.ParseRanges(p.Spec.CIDRs, pairs)
		out = append(out, Pool{Pool: p, Ranges: ranges})
	}
	return out
}

// Contains tells whether the pool's spec holds addr.
func (p Pool) Contains(addr netip.Addr) bool {
	return slices.ContainsFunc(p.Ranges, func(r lbipam.Range) bool { return r.Contains(addr) })
}

// Covers tells whether the announcement covers addr, an address of svc:
// the Service is selected and a selected pool holds the address.
func (a *Announcement) Covers(svc *corev1.Service, addr netip.Addr, pools []Pool) bool {
	if !a.SelectsService(svc) {
		return false
	}
	return slices.ContainsFunc(pools, func(p Pool) bool { return a.SelectsPool(p.Pool) && p.Contains(addr) })
}

// Rank orders nodes for an address, first the one that should answer for
// it in L2 mode, by election: rendezvous hashing, so every node computes
// the same order from the names alone, addresses spread evenly, and a
// node joining or leaving moves only the addresses it wins or held.
func Rank(election svcnetv1alpha1.L2NodeElection, addr netip.Addr, nodes []string) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case Outranks(election, addr, a, b):
			return -1
		}
		return 1
	})
	return out
}

// Outranks tells whether node a comes before node b for addr. Rendezvous:
// the higher score (Score) first; MetalLB: the lower SHA-256 of
// "node#address" first, as MetalLB's speakers elect. Ties go by name.
func Outranks(election svcnetv1alpha1.L2NodeElection, addr netip.Addr, a, b string) bool {
	if election == svcnetv1alpha1.L2NodeElectionMetalLB {
		ha, hb := metalLBHash(addr, a), metalLBHash(addr, b)
		if c := bytes.Compare(ha[:], hb[:]); c != 0 {
			return c < 0
		}
		return a < b
	}
	sa, sb := Score(addr, a), Score(addr, b)
	if sa != sb {
		return sa > sb
	}
	return a < b
}

// Score is node's rendezvous score for addr: higher wins.
func Score(addr netip.Addr, node string) uint64 {
	h := sha256.Sum256([]byte(node + "/" + addr.String()))
	return binary.BigEndian.Uint64(h[:8])
}

// metalLBHash is MetalLB's election key of node for addr.
func metalLBHash(addr netip.Addr, node string) [sha256.Size]byte {
	return sha256.Sum256([]byte(node + "#" + addr.String()))
}

// AnsweredPart is the part of a Service's svcnet.io/LoadBalancerAnnounced
// condition message that names the node answering for an address, e.g.
// "192.168.240.1 answered by node-2 (ARP on eth0)"; the agents' Announced
// Events start with it too.
func AnsweredPart(addr, node string, protocol svcnetv1alpha1.L2Protocol, iface string) string {
	return fmt.Sprintf("%s answered by %s (%s on %s)", addr, node, protocol, iface)
}

// NoCandidateMessage is the condition's message when no node may announce
// addr.
func NoCandidateMessage(addr string) string {
	return fmt.Sprintf("no node may announce %s (none selected, or none with a ready endpoint under externalTrafficPolicy Local)", addr)
}

// L2ProtocolOf is how an address is answered for: ARP for IPv4, NDP for
// IPv6.
func L2ProtocolOf(a netip.Addr) svcnetv1alpha1.L2Protocol {
	if a.Is4() {
		return svcnetv1alpha1.L2ProtocolARP
	}
	return svcnetv1alpha1.L2ProtocolNDP
}
