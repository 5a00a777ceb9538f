// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// Announce is --lb-announce: how the client reaches LoadBalancer
// addresses.
type Announce string

// How the client reaches LoadBalancer addresses (--lb-announce).
const (
	// AnnounceL2: the client is on the nodes' segment with the range on
	// its link; one node answers ARP for each address.
	AnnounceL2 Announce = "l2"
	// AnnounceBGP: the client's gateway is a router (FRR) that peers
	// with every node and learns the addresses, ECMP.
	AnnounceBGP Announce = "bgp"
	// AnnounceRoutes: a static ECMP route through every node, as before
	// announcements existed.
	AnnounceRoutes Announce = "routes"
)

// Announces are the values of --lb-announce.
var Announces = []Announce{AnnounceL2, AnnounceBGP, AnnounceRoutes}

// The router of --lb-announce=bgp: on the fabric, its own AS, the nodes'
// AS, BGP timers fast enough for a short failover without BFD, and BFD
// (MetalLB's BFDProfile defaults) with every node, which comes up once
// the svcnet-up announcement's peer has bfd.
const (
	routerASN    = 64500
	nodesASN     = 64512
	bgpKeepalive = time.Second
	bgpHoldTime  = 3 * time.Second
	announcement = "svcnet-up"
)

var routerBFD = frr.BFD{ReceiveInterval: 300 * time.Millisecond, TransmitInterval: 300 * time.Millisecond, DetectMultiplier: 3}

// routeLoadBalancers makes the client reach the LoadBalancer range as
// --lb-announce says.
func (cl *cluster) routeLoadBalancers(c Config) error {
	lb := c.ranges.loadBalancer
	switch c.LBAnnounce {
	case AnnounceL2:
		// On the client's link: it asks the segment (ARP) for each address.
		for _, p := range lb {
			if _, err := cl.lab.Run(cl.client, "ip", "route", "add", p.String(), "dev", "eth0"); err != nil {
				return err
			}
		}
	case AnnounceBGP:
		return cl.addRouter(c)
	default:
		for _, p := range lb {
			if err := cl.lab.RouteVia(cl.client, p, cl.nodeIPs(p.Addr())...); err != nil {
				return err
			}
		}
	}
	return nil
}

// addRouter makes the router namespace of --lb-announce=bgp, an address
// of each family, and the client's default route of each family through
// it. Linux has no switch for a router's IPv6 redirects (AddRouter turns
// off the IPv4 ones), so the client ignores them: one would send it
// straight to a node, past the router's later routes.
func (cl *cluster) addRouter(c Config) error {
	addrs := c.fabricAddrs(routerHost)
	ns, err := cl.lab.AddRouter("router", addrs[0], addrs[1:]...)
	if err != nil {
		return err
	}
	cl.router = ns
	for _, s := range []string{"net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.eth0.accept_redirects=0"} {
		if _, err := cl.lab.Run(cl.client, "sysctl", "-qw", s); err != nil {
			return err
		}
	}
	for _, a := range addrs {
		if _, err := cl.lab.Run(cl.client, "ip", "route", "add", "default", "via", a.Addr().String()); err != nil {
			return err
		}
	}
	return nil
}

// startRouter runs FRR in the router namespace, peering with every node
// and ready for BFD with each: a node whose peer has no bfd keeps its BGP
// session, its BFD session staying down.
func (cl *cluster) startRouter(s *session) error {
	root := filepath.Join(filepath.Dir(s.binDir), "frr", "root")
	if env := os.Getenv("SVCNET_FRR_ROOT"); env != "" {
		root = env
	}
	var neighbors []frr.Neighbor
	for _, n := range cl.nodes {
		// A session a family: each carries its own family's addresses.
		for _, ip := range n.Net.IPs {
			neighbors = append(neighbors, frr.Neighbor{Addr: ip, ASN: nodesASN, BFD: &routerBFD})
		}
	}
	r, err := frr.Start(frr.Config{
		Root: root, StateDir: filepath.Join(os.TempDir(), cl.prefix+"-frr"), NetNS: netlab.Path(cl.router),
		// A router ID is an IPv4 address whatever the families.
		RouterID: onFabric(corev1.IPv4Protocol, routerHost).Addr(), ASN: routerASN, Neighbors: neighbors, Keepalive: bgpKeepalive, Hold: bgpHoldTime,
	})
	if err != nil {
		return fmt.Errorf("starting the router (FRR): %w", err)
	}
	cl.frr = r
	return nil
}

// ensureAnnouncement creates (or, after a change of --lb-announce, sets)
// the announcement of the svcnet-up pool's addresses.
func ensureAnnouncement(ctx context.Context, c client.Client, mode Announce, routers []netip.Addr) error {
	if mode == AnnounceRoutes {
		return client.IgnoreNotFound(c.Delete(ctx, &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: announcement}}))
	}
	spec := svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeL2}
	if mode == AnnounceBGP {
		var peers []svcnetv1alpha1.BGPPeer
		for _, r := range routers {
			peers = append(peers, svcnetv1alpha1.BGPPeer{
				Address: r.String(), ASN: routerASN,
				HoldTime: &metav1.Duration{Duration: bgpHoldTime}, KeepaliveTime: &metav1.Duration{Duration: bgpKeepalive},
			})
		}
		spec = svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeBGP, BGP: &svcnetv1alpha1.BGPAnnouncement{LocalASN: nodesASN, Peers: peers}}
	}
	ann := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: announcement}, Spec: spec}
	err := c.Create(ctx, ann)
	if apierrors.IsAlreadyExists(err) {
		var have svcnetv1alpha1.LoadBalancerAnnouncement
		if err := c.Get(ctx, client.ObjectKey{Name: announcement}, &have); err != nil {
			return err
		}
		if have.Spec.Mode == spec.Mode {
			return nil // later edits by the user stay
		}
		have.Spec = spec
		err = c.Update(ctx, &have)
	}
	if err != nil {
		return fmt.Errorf("creating LoadBalancerAnnouncement %s: %w", announcement, err)
	}
	return nil
}

// announceTour are the tour's lines that show how the client learns the
// LoadBalancer addresses.
func announceTour(cl *cluster) string {
	switch {
	case cl.frr != nil:
		return fmt.Sprintf("  %s -c 'show ip bgp'   # the router learns each LoadBalancer IP from the nodes (BGP, ECMP)\n  ip netns exec %s ip route\n",
			cl.frr.VtyshCommand(), cl.router)
	case cl.lbAnnounce == AnnounceL2:
		return fmt.Sprintf("  ip netns exec %s ip neigh show   # one node answers ARP for each LoadBalancer IP (L2)\n", cl.client)
	}
	return ""
}
