// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/controllers"
	"github.com/svcnet-io/svcnet/controllers/endpointslice"
	"github.com/svcnet-io/svcnet/dataplane/announce"
	"github.com/svcnet-io/svcnet/internal/announcementpolicy"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/frr"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/harness/segmentwatch"
	"github.com/svcnet-io/svcnet/test/testenv"
)

// The announcement benchmark (o): three nodes, each running `svcnet
// agent` inside its namespace as a DaemonSet Pod would, a LoadBalancer
// Service with an endpoint on every node, and a client that opens a new
// connection every 10 ms (100 ms timeout). The node that carries the
// client's traffic (L2: the one answering ARP; BGP: the next hop the router
// picks for the client's flow) is killed (its agent SIGKILLed, or its
// link cut on the fabric), and the time to the first connection carried
// by another node is measured, annTries or annKillTries times.
const (
	annTries     = 50 // a link cut's; a SIGKILL's are annKillTries
	annKillTries = 20
	// annProbeEvery is how often the client opens a new connection, and
	// the listener on the segment asks; annProbeTimeout a connection's
	// time to be answered.
	annProbeEvery   = 10 * time.Millisecond
	annProbeTimeout = 100 * time.Millisecond
	// annRouterID is the router's BGP identifier, an IPv4 address
	// whatever the family.
	annRouterID  = "192.168.50.254"
	annHoldTime  = 3 * time.Second
	annKeepalive = annHoldTime / 3 // MetalLB's native BGP keeps this ratio, unsettable
	// annBFDInterval and annBFDMultiplier are both ends' BFD in the
	// "with BFD" rows: MetalLB's BFDProfile defaults, and svcnet's.
	annBFDInterval   = 300 * time.Millisecond
	annBFDMultiplier = 3
	// annBFDFastInterval is the rows of a fabric that asks for faster
	// detection, with the same multiplier.
	annBFDFastInterval = 100 * time.Millisecond
)

// annFamily is the address plan of a failover cluster: nodes, Pods,
// Services, client, router and pool all of one family.
type annFamily struct {
	name string // "IPv4" or "IPv6"
	// nodeIP and podCIDR are node i's (1 to 3) as fmt patterns.
	nodeIP, podCIDR          string
	clusterCIDR, serviceCIDR string
	client, router           netip.Prefix
	pool                     string
}

var (
	annIPv4 = annFamily{name: "IPv4", nodeIP: "192.168.50.%d/24", podCIDR: "10.244.%d.0/24", clusterCIDR: "10.244.0.0/16",
		serviceCIDR: "10.96.0.0/16", client: netip.MustParsePrefix("192.168.50.100/24"), router: netip.MustParsePrefix("192.168.50.254/24"),
		pool: "192.168.78.0/28"}
	annIPv6 = annFamily{name: "IPv6", nodeIP: "fd00:50::%d/64", podCIDR: "fd00:244:0:%d::/64", clusterCIDR: "fd00:244::/48",
		serviceCIDR: "fd00:96::/112", client: netip.MustParsePrefix("fd00:50::100/64"), router: netip.MustParsePrefix("fd00:50::fe/64"),
		pool: "fd00:78::10/124"}
)

// ipFlag is ip(8)'s flag for the family.
func (f annFamily) ipFlag() string {
	if f.client.Addr().Is6() {
		return "-6"
	}
	return "-4"
}

// annSetup is one configuration of the failover benchmark, run on a
// cluster of its own.
type annSetup struct {
	mode   svcnetv1alpha1.AnnouncementMode
	impl   annImpl
	family annFamily
	// bfdInterval, when set, runs BFD beside each BGP session at this
	// transmit and receive interval (times annBFDMultiplier): on the
	// peer, and bfdd with neighbor X bfd on the router.
	bfdInterval time.Duration
	// framesDropped makes the fabric drop the L2 heartbeat frames.
	framesDropped bool
	// faults are the ways the carrier is killed: "kill" (its announcer
	// SIGKILLed) and "link" (its link cut).
	faults []string
}

func (s annSetup) name() string {
	n := fmt.Sprintf("%s, %s", s.impl, s.mode)
	if s.impl == annByMetalLB && s.metallbFRR() && s.bfdInterval == 0 {
		n += " (FRR mode)"
	}
	if s.bfdInterval > 0 {
		n += fmt.Sprintf(" with BFD %s x %d", fmtDur(s.bfdInterval), annBFDMultiplier)
	}
	if s.framesDropped {
		n += ", heartbeat frames dropped (UDP path)"
	}
	return n
}

// metallbFRR tells whether MetalLB's speaker runs its FRR mode: for BFD,
// which its native BGP lacks, and for IPv6, which its native BGP does not
// announce.
func (s annSetup) metallbFRR() bool {
	return s.mode == svcnetv1alpha1.AnnouncementModeBGP && (s.bfdInterval > 0 || s.family.name == annIPv6.name)
}

// annSetups are the IPv4 failover benchmark's (o) configurations,
// svcnet's and MetalLB's of a mode one after the other.
var annSetups = []annSetup{
	{mode: svcnetv1alpha1.AnnouncementModeL2, impl: annBySvcnet, family: annIPv4, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeL2, impl: annByMetalLB, family: annIPv4, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeL2, impl: annBySvcnet, family: annIPv4, framesDropped: true, faults: []string{"link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annBySvcnet, family: annIPv4, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annByMetalLB, family: annIPv4, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annBySvcnet, family: annIPv4, bfdInterval: annBFDInterval, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annByMetalLB, family: annIPv4, bfdInterval: annBFDInterval, faults: []string{"kill", "link"}},
	// A SIGKILL moves nothing with BFD at any interval (the routes stay,
	// see annNote): the faster rows cut links only.
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annBySvcnet, family: annIPv4, bfdInterval: annBFDFastInterval, faults: []string{"link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annByMetalLB, family: annIPv4, bfdInterval: annBFDFastInterval, faults: []string{"link"}},
}

// annSetups6 are the IPv6 failover benchmark's (q): L2 over NDP and BGP
// over IPv6 sessions, each side's, and BFD at the default interval.
var annSetups6 = []annSetup{
	{mode: svcnetv1alpha1.AnnouncementModeL2, impl: annBySvcnet, family: annIPv6, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeL2, impl: annByMetalLB, family: annIPv6, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annBySvcnet, family: annIPv6, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annByMetalLB, family: annIPv6, faults: []string{"kill", "link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annBySvcnet, family: annIPv6, bfdInterval: annBFDInterval, faults: []string{"link"}},
	{mode: svcnetv1alpha1.AnnouncementModeBGP, impl: annByMetalLB, family: annIPv6, bfdInterval: annBFDInterval, faults: []string{"link"}},
}

type annCluster struct {
	root, dir, kubeconfig string
	annSetup
	env   *testenv.Env
	lab   *netlab.Lab
	nodes []*netlab.Node
	macs  map[string]string
	// nodeAddrs are each node's addresses on the fabric, its link-local
	// one included (a BGP route over IPv6 may name it as next hop).
	nodeAddrs      map[string][]netip.Addr
	client, router string
	frr            *frr.Router
	agents         map[string]*proc
	speakers       map[string]*proc // MetalLB's, by node
	reloader       *frrReloader     // MetalLB's FRR mode (with BFD)
	svc            *corev1.Service
	vip            netip.Addr
	neigh          *netlink.Handle // the client's namespace
	routes         *netlink.Handle // the router's namespace (BGP)
}

func startAnnCluster(ctx context.Context, root string, setup annSetup) (*annCluster, error) {
	dir, err := os.MkdirTemp("", "svcnet-bench-ann")
	if err != nil {
		return nil, err
	}
	c := &annCluster{root: root, dir: dir, annSetup: setup, macs: map[string]string{}, nodeAddrs: map[string][]netip.Addr{}, agents: map[string]*proc{}, speakers: map[string]*proc{}}
	if c.env, err = testenv.Start(testenv.Options{ServiceCIDRs: setup.family.serviceCIDR}); err != nil {
		return nil, err
	}
	if _, err := c.env.StartManager(controllers.Options{
		Controllers:   []string{endpointslice.ControllerName, controllers.LoadBalancerName, controllers.AnnouncementName},
		EndpointSlice: endpointslice.DefaultOptions(),
	}); err != nil {
		return c, err
	}
	c.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := c.env.WriteKubeconfig(c.kubeconfig); err != nil {
		return c, err
	}
	if c.lab, err = netlab.New("svcnet-bann"); err != nil {
		return c, err
	}
	if err := c.addNodes(ctx); err != nil {
		return c, err
	}
	if err := c.addClient(); err != nil {
		return c, err
	}
	for _, n := range c.nodes {
		if err := c.startAgent(n); err != nil {
			return c, err
		}
	}
	if c.impl == annByMetalLB {
		if err := c.installMetalLB(ctx); err != nil {
			return c, err
		}
		if c.metallbFRR() {
			if c.reloader, err = startFRRReloader(root, dir, c.nodes); err != nil {
				return c, err
			}
		}
		for _, n := range c.nodes {
			if err := c.startSpeaker(ctx, n); err != nil {
				return c, err
			}
		}
	}
	return c, c.deploy(ctx)
}

func (c *annCluster) addNodes(ctx context.Context) error {
	u, err := url.Parse(c.env.Config.Host)
	if err != nil {
		return err
	}
	f := c.family
	for i := 1; i <= 3; i++ {
		n, err := c.lab.AddNode(fmt.Sprintf("node%d", i), netip.MustParsePrefix(fmt.Sprintf(f.nodeIP, 10+i)),
			netip.MustParsePrefix(fmt.Sprintf(f.podCIDR, i)), netip.MustParsePrefix(f.serviceCIDR))
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
		if err := c.lab.Forward(n.NetNS, u.Host, u.Host); err != nil {
			return err
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{corev1.LabelHostname: n.Name}}}
		if err := c.env.Client.Create(ctx, node); err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP.String()}}
		if err := c.env.Client.Status().Update(ctx, node); err != nil {
			return err
		}
		if err := c.readFabricLink(n); err != nil {
			return err
		}
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				if err := a.Route(b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// readFabricLink records n's MAC and addresses on the fabric.
func (c *annCluster) readFabricLink(n *netlab.Node) error {
	return netns.Do(netlab.Path(n.NetNS), func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		c.macs[n.Name] = ifi.HardwareAddr.String()
		addrs, err := ifi.Addrs()
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				c.nodeAddrs[n.Name] = append(c.nodeAddrs[n.Name], p.Addr())
			}
		}
		return err
	})
}

// addClient puts the client on the segment: the pool on its link (L2), or
// behind a router running FRR (BGP).
func (c *annCluster) addClient() error {
	var err error
	f := c.family
	if c.client, err = c.lab.AddClient("client", f.client); err != nil {
		return err
	}
	ns, _ := vns.GetFromPath(netlab.Path(c.client))
	defer ns.Close()
	if c.neigh, err = netlink.NewHandleAt(ns); err != nil {
		return err
	}
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		_, err = c.lab.Run(c.client, "ip", "route", "add", f.pool, "dev", "eth0")
		return err
	}
	if c.router, err = c.lab.AddRouter("router", f.router); err != nil {
		return err
	}
	// Linux has no switch for a router's IPv6 redirects (AddRouter turns
	// off the IPv4 ones): the client ignores them. And the router's
	// multipath hash of an IPv6 flow includes its flow label, which Linux
	// picks anew for each connection: the client sends none, so that all
	// its connections take one next hop, as IPv4's hash of the addresses
	// makes them.
	for _, s := range []string{"net.ipv6.conf.all.accept_redirects=0", "net.ipv6.conf.eth0.accept_redirects=0", "net.ipv6.auto_flowlabels=0"} {
		if _, err := c.lab.Run(c.client, "sysctl", "-qw", s); err != nil {
			return err
		}
	}
	rns, _ := vns.GetFromPath(netlab.Path(c.router))
	defer rns.Close()
	if c.routes, err = netlink.NewHandleAt(rns); err != nil {
		return err
	}
	var neighbors []frr.Neighbor
	for _, n := range c.nodes {
		nb := frr.Neighbor{Addr: n.IP, ASN: 64512}
		if c.bfdInterval > 0 {
			nb.BFD = &frr.BFD{ReceiveInterval: c.bfdInterval, TransmitInterval: c.bfdInterval, DetectMultiplier: annBFDMultiplier}
		}
		neighbors = append(neighbors, nb)
	}
	if c.frr, err = frr.Start(frr.Config{Root: filepath.Join(c.root, "bin/frr/root"), StateDir: filepath.Join(c.dir, "frr"),
		NetNS: netlab.Path(c.router), RouterID: netip.MustParseAddr(annRouterID), ASN: 64500, Neighbors: neighbors,
		Keepalive: annKeepalive, Hold: annHoldTime}); err != nil {
		return err
	}
	_, err = c.lab.Run(c.client, "ip", "route", "add", f.pool, "via", f.router.Addr().String())
	return err
}

func (c *annCluster) startAgent(n *netlab.Node) error {
	p, err := startProc(filepath.Join(c.dir, n.Name+".log"), "ip", "netns", "exec", n.NetNS, filepath.Join(c.root, "bin/svcnet-agent"), "agent",
		"--kubeconfig="+c.kubeconfig, "--node-name="+n.Name, "--mode=nftables", "--cluster-cidr="+c.family.clusterCIDR,
		"--conntrack-max-per-core=0", "--healthz-bind-address=0", "--metrics-bind-address=0", "--v=2")
	if err != nil {
		return err
	}
	c.agents[n.Name] = p
	return nil
}

// deploy creates the pool, the announcement, a Pod on every node and
// the LoadBalancer Service, and waits for the client to reach it.
func (c *annCluster) deploy(ctx context.Context) error {
	objs := []client.Object{
		&svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{c.family.pool}}},
	}
	if c.impl == annBySvcnet {
		objs = append(objs, c.announcement())
	}
	for _, n := range c.nodes {
		p, err := n.AddPod("web-"+n.Name, 8080)
		if err != nil {
			return err
		}
		objs = append(objs, builder.Pod(p.Name, "default").Label("app", "web").ContainerPort("http", 8080).Node(n.Name).IP(p.IP.String()).Ready().Obj())
	}
	c.svc = builder.Service("web", "default").Port("http", 80, intstr.FromString("http")).Selector("app", "web").Type(corev1.ServiceTypeLoadBalancer).Obj()
	objs = append(objs, c.svc)
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok {
			if err := c.env.CreatePod(ctx, pod); err != nil {
				return err
			}
			continue
		}
		if err := c.env.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var svc corev1.Service
		if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(c.svc), &svc); err == nil && len(svc.Status.LoadBalancer.Ingress) > 0 {
			c.vip = netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
			if c.connect() == nil && c.carrier(ctx) != "" {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("the LoadBalancer Service never answered the client")
}

func (c *annCluster) announcement() *svcnetv1alpha1.LoadBalancerAnnouncement {
	a := &svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: c.mode}}
	if c.mode == svcnetv1alpha1.AnnouncementModeBGP {
		a.Spec.BGP = &svcnetv1alpha1.BGPAnnouncement{LocalASN: 64512, Peers: []svcnetv1alpha1.BGPPeer{{Address: c.family.router.Addr().String(), ASN: 64500,
			HoldTime: &metav1.Duration{Duration: annHoldTime}, KeepaliveTime: &metav1.Duration{Duration: annKeepalive}}}}
		if c.bfdInterval > 0 {
			a.Spec.BGP.Peers[0].BFD = &svcnetv1alpha1.BGPPeerBFD{ReceiveInterval: &metav1.Duration{Duration: c.bfdInterval},
				TransmitInterval: &metav1.Duration{Duration: c.bfdInterval}, DetectMultiplier: annBFDMultiplier}
		}
	}
	return a
}

var viaNodeRE = regexp.MustCompile(`via (\S+)`)

// carrier is the node the client's traffic to the address goes to: the
// one whose MAC the client's neighbour entry holds (L2), or the next hop
// the router picks for the client's flow (BGP).
func (c *annCluster) carrier(_ context.Context) string {
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		mac := c.neighbourMAC()
		for name, m := range c.macs {
			if m == mac {
				return name
			}
		}
		return ""
	}
	// Asked by netlink, not by running ip: a check costs well under a
	// millisecond, so it does not blur the time it measures.
	routes, err := c.routes.RouteGetWithOptions(c.vip.AsSlice(), &netlink.RouteGetOptions{Iif: "eth0", SrcAddr: c.family.client.Addr().AsSlice()})
	if err != nil || len(routes) == 0 || routes[0].Gw == nil {
		return ""
	}
	gw, _ := netip.AddrFromSlice(routes[0].Gw)
	for name, addrs := range c.nodeAddrs {
		if slices.Contains(addrs, gw.Unmap()) {
			return name
		}
	}
	return ""
}

// connect makes one new connection to the address; nil when it was
// answered.
func (c *annCluster) connect() error {
	hc := netlab.Client(c.client, annProbeTimeout)
	_, err := netlab.Get(context.Background(), hc, "http://"+netip.AddrPortFrom(c.vip, 80).String()+"/")
	return err
}

// neighbourMAC is the client's neighbour entry for the address (L2).
func (c *annCluster) neighbourMAC() string {
	family := netlink.FAMILY_V4
	if c.vip.Is6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := c.neigh.NeighList(0, family)
	if err != nil {
		return ""
	}
	for _, n := range neighs {
		if n.IP.Equal(c.vip.AsSlice()) && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0 {
			return n.HardwareAddr.String()
		}
	}
	return ""
}

func (c *annCluster) stop() {
	for _, p := range c.speakers {
		p.stop()
	}
	if c.reloader != nil {
		c.reloader.stop()
	}
	for _, p := range c.agents {
		p.stop()
	}
	if c.frr != nil {
		c.frr.Stop()
	}
	for _, h := range []*netlink.Handle{c.neigh, c.routes} {
		if h != nil {
			h.Close()
		}
	}
	if c.lab != nil {
		c.lab.Close()
	}
	if c.env != nil {
		_ = c.env.Stop()
	}
	_ = os.RemoveAll(c.dir)
}

// failover kills the carrier of the client's traffic and returns how long
// it took until a connection succeeded through another node, and the
// longest time without a successful connection.
func (c *annCluster) failover(ctx context.Context, how string) (took, outage time.Duration, victim string, err error) {
	victim = c.carrier(ctx)
	if victim == "" {
		return 0, 0, "", errors.New("no node carries the traffic")
	}
	pctx, stopProbe := context.WithTimeout(ctx, annGiveUp+time.Second)
	defer stopProbe()
	answered := c.probe(pctx)
	start := time.Now()
	switch how {
	case "kill":
		if err := c.announcer(victim).cmd.Process.Kill(); err != nil {
			return 0, 0, victim, err
		}
	case "link":
		if _, err := c.lab.Run(c.lab.Fabric(), "ip", "link", "set", "p-"+victim, "down"); err != nil {
			return 0, 0, victim, err
		}
	}
	lastOK := start
	giveUp := time.After(annGiveUp)
	for {
		var now time.Time
		select {
		case <-giveUp:
			return 0, outage, victim, fmt.Errorf("%w %s within %s (%s)", errNeverMoved, victim, annGiveUp, c.routerView())
		case now = <-answered:
		}
		// Take in every answer that came while the last check ran, so
		// the gaps are between answers, not between checks.
		for more := true; more; {
			if now.After(lastOK) {
				outage = max(outage, now.Sub(lastOK))
				lastOK = now
			}
			select {
			case now = <-answered:
			default:
				more = false
			}
		}
		if lastOK.Equal(start) {
			continue
		}
		if c.movedFrom(ctx, victim) {
			return lastOK.Sub(start), outage, victim, nil
		}
		if how == "kill" && c.keepsRoutesOnKill() && lastOK.Sub(start) > 2*annHoldTime {
			// The router keeps the killed announcer's routes and its
			// node keeps forwarding: nothing moves.
			return 0, outage, victim, nil
		}
	}
}

// probe opens a new connection to the address every 10 ms, whether the
// ones before it were answered or not, until ctx ends, and sends the time
// each answered one completed.
func (c *annCluster) probe(ctx context.Context) <-chan time.Time {
	answered := make(chan time.Time, int(annGiveUp/annProbeEvery)+100)
	go func() {
		tick := time.NewTicker(annProbeEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			go func() {
				if c.connect() == nil {
					answered <- time.Now()
				}
			}()
		}
	}()
	return answered
}

// routerView is what a try that never moved leaves to read: the router's
// routes to the address, the next hop it picks for the client, whether a
// new connection is answered and the BGP sessions (BGP), or the client's
// neighbour entry (L2).
func (c *annCluster) routerView() string {
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		return "neighbour entry " + c.neighbourMAC()
	}
	route, _ := c.lab.Run(c.router, "ip", c.family.ipFlag(), "route", "show", c.vip.String())
	sum, _ := c.frr.Vtysh("show bgp summary")
	return fmt.Sprintf("route %q; the client's flow to %q; a new connection: %v; %s", strings.TrimSpace(route), c.carrier(context.Background()),
		c.connect(), strings.Join(strings.Fields(sum), " "))
}

// annGiveUp is how long a try waits for the traffic to move.
const annGiveUp = 30 * time.Second

// errNeverMoved is a try whose traffic did not leave the killed node in
// annGiveUp: the row counts it, and the next try follows.
var errNeverMoved = errors.New("traffic never left")

// keepsRoutesOnKill tells whether a SIGKILLed announcer leaves its BGP
// sessions' routes in place: svcnet's agent by graceful restart, MetalLB's
// FRR mode because the sessions are FRR's, not the speaker's.
func (c *annCluster) keepsRoutesOnKill() bool {
	return c.mode == svcnetv1alpha1.AnnouncementModeBGP && (c.impl == annBySvcnet || c.metallbFRR())
}

// announcer is the process that announces for node: svcnet's agent, or
// MetalLB's speaker.
func (c *annCluster) announcer(node string) *proc {
	if c.impl == annByMetalLB {
		return c.speakers[node]
	}
	return c.agents[node]
}

// movedFrom tells whether the client's traffic now goes to another node
// than victim.
func (c *annCluster) movedFrom(ctx context.Context, victim string) bool {
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		mac := c.neighbourMAC()
		return mac != "" && mac != c.macs[victim]
	}
	n := c.carrier(ctx)
	return n != "" && n != victim
}

// restore brings the victim back and waits for the steady state.
func (c *annCluster) restore(ctx context.Context, how, victim string) error {
	if how == "kill" {
		start := c.startAgent
		if c.impl == annByMetalLB {
			start = func(n *netlab.Node) error { return c.startSpeaker(ctx, n) }
		}
		if err := start(nodeByName(c.nodes, victim)); err != nil {
			return err
		}
	} else if _, err := c.lab.Run(c.lab.Fabric(), "ip", "link", "set", "p-"+victim, "up"); err != nil {
		return err
	}
	if c.impl == annByMetalLB {
		time.Sleep(metallbSettle)
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if c.steady(ctx) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not come back", victim)
}

// steady: every node announces again (L2: a carrier is named and the
// client reaches it; BGP: every node a next hop, sessions up).
func (c *annCluster) steady(ctx context.Context) bool {
	if c.mode == svcnetv1alpha1.AnnouncementModeBGP {
		out, _ := c.lab.Run(c.router, "ip", c.family.ipFlag(), "route", "show", c.vip.String())
		if len(viaNodeRE.FindAllString(out, -1)) != len(c.nodes) {
			return false
		}
		sum, _ := c.frr.Vtysh("show bgp summary")
		if strings.Count(sum, "Active") > 0 || strings.Count(sum, "Connect") > 0 {
			return false
		}
		time.Sleep(2 * time.Second) // let the restarted speaker settle
		return c.connect() == nil
	}
	time.Sleep(time.Second) // a restarted node listens, then takes back what it ranks first for
	return c.connect() == nil && c.carrier(ctx) != ""
}

func nodeByName(nodes []*netlab.Node, name string) *netlab.Node {
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// annResult is one scenario's tries, as recorded.
type annResult struct {
	Name string `json:"name"`
	// NotMeasured says why the scenario could not run, or not to its end.
	NotMeasured string `json:"notMeasured,omitempty"`
	// Took are the tries' times to move, Outages their longest gaps.
	Took    []time.Duration `json:"took,omitempty"`
	Outages []time.Duration `json:"outages,omitempty"`
	// Doubles counts the questions two nodes answered, of Rounds (L2).
	Doubles int `json:"doubles,omitempty"`
	Rounds  int `json:"rounds,omitempty"`
	// Stuck counts the tries whose traffic never moved (errNeverMoved).
	Stuck int `json:"stuck,omitempty"`
}

// annSettings are what a failover table ran with, recorded beside its
// samples: its text is written from them, not from the code of the day.
type annSettings struct {
	Tries     int `json:"tries"`
	KillTries int `json:"killTries"`
	// ProbeEvery and ProbeTimeout are the client's new connections.
	ProbeEvery   time.Duration `json:"probeEvery"`
	ProbeTimeout time.Duration `json:"probeTimeout"`
	GiveUp       time.Duration `json:"giveUp"`
	// Heartbeat and DeadAfter are svcnet's L2 liveness.
	Heartbeat       time.Duration `json:"heartbeat"`
	DeadAfter       time.Duration `json:"deadAfter"`
	Keepalive       time.Duration `json:"keepalive"`
	Hold            time.Duration `json:"hold"`
	BFDInterval     time.Duration `json:"bfdInterval"`
	BFDMultiplier   int           `json:"bfdMultiplier"`
	GracefulRestart time.Duration `json:"gracefulRestart"`
	NodeIPs         string        `json:"nodeIPs"`
	Pool            string        `json:"pool"`
}

func annSettingsFor(f annFamily, scale int) annSettings {
	l2 := announce.DefaultOptions()
	return annSettings{Tries: max(1, annTries/scale), KillTries: max(1, annKillTries/scale), ProbeEvery: annProbeEvery, ProbeTimeout: annProbeTimeout,
		GiveUp: annGiveUp, Heartbeat: l2.HeartbeatInterval, DeadAfter: l2.DeadAfter, Keepalive: annKeepalive, Hold: annHoldTime,
		BFDInterval: annBFDInterval, BFDMultiplier: annBFDMultiplier, GracefulRestart: announcementpolicy.DefaultGracefulRestartTime,
		NodeIPs: fmt.Sprintf(f.nodeIP, 11) + " to " + fmt.Sprintf(f.nodeIP, 13), Pool: f.pool}
}

// annData is a failover table's record.
type annData struct {
	Settings annSettings `json:"settings"`
	Rows     []annResult `json:"rows"`
}

// annTable is one failover table: (o) on IPv4, (q) on IPv6.
type annTable struct {
	letter, title string
	family        annFamily
	setups        []annSetup
	// intro and note are the text before and after the table.
	intro func(rec *record[annData]) string
	note  string
}

var (
	annTableIPv4 = annTable{letter: "o", title: "## LoadBalancer announcements: failover", family: annIPv4, setups: annSetups,
		intro: annIntroIPv4, note: annNote}
	annTableIPv6 = annTable{letter: "q", title: "## LoadBalancer announcements over IPv6: failover (q)", family: annIPv6, setups: annSetups6,
		intro: annIntroIPv6}
)

// report runs the table, records it in resultsDir when keep is set, and
// renders it from the record.
func (t annTable) report(ctx context.Context, root string, scale int, skip string, keep bool) (string, error) {
	if skip != "" {
		return fmt.Sprintf("%s\n\nNot run: %s.\n", t.title, skip), nil
	}
	if err := frr.Available(filepath.Join(root, "bin/frr/root")); err != nil {
		return "", err
	}
	rec := newRecord[annData](root, t.letter)
	rec.Tools["metallb"] = metallbVersion(root)
	settings := annSettingsFor(t.family, scale)
	load := newLoadSampler()
	rows := t.run(ctx, root, settings)
	return rec.close(root, load, annData{Settings: settings, Rows: rows}, keep, t.render)
}

// run measures every setup of the table, each on a cluster of its own:
// a row for each of its faults.
func (t annTable) run(ctx context.Context, root string, settings annSettings) []annResult {
	var rows []annResult
	for _, s := range t.setups {
		c, err := startAnnCluster(ctx, root, s)
		if err == nil && s.framesDropped {
			err = c.dropHeartbeatFrames()
		}
		if err != nil {
			if c != nil {
				c.stop()
			}
			progress("(%s) %s: %v\n", t.letter, s.name(), err)
			rows = append(rows, annResult{Name: s.name(), NotMeasured: err.Error()})
			continue
		}
		for _, how := range s.faults {
			n := settings.Tries
			if how == "kill" {
				n = settings.KillTries
			}
			res, err := t.scenario(ctx, c, how, n)
			if err != nil {
				// A scenario that cannot go on says so in its row; the
				// others still run.
				progress("(%s) %s: %v\n", t.letter, res.Name, err)
				rows = append(rows, annResult{Name: res.Name, NotMeasured: err.Error()})
				break
			}
			rows = append(rows, res)
		}
		c.stop()
	}
	return rows
}

// scenario kills the carrier tries times, restoring it after each, while
// a listener on the segment (L2) counts questions two nodes answered.
func (t annTable) scenario(ctx context.Context, c *annCluster, how string, tries int) (annResult, error) {
	fault := map[string]string{"kill": "announcer SIGKILL", "link": "link cut"}[how]
	res := annResult{Name: c.name() + ", " + fault}
	deadline := time.Now().Add(time.Minute)
	for !c.steady(ctx) {
		if time.Now().After(deadline) {
			return res, errors.New("the cluster never settled")
		}
	}
	var w *segmentwatch.Watch
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		var err error
		if w, err = segmentwatch.Start(c.client, "eth0", c.family.client.Addr(), c.vip, annProbeEvery); err != nil {
			return res, err
		}
		defer w.Close()
	}
	for i := range tries {
		took, outage, victim, err := c.failover(ctx, how)
		if errors.Is(err, errNeverMoved) {
			res.Stuck++
			progress("(%s) %s try %d: %v\n", t.letter, res.Name, i+1, err)
			if err := c.restore(ctx, how, victim); err != nil {
				return res, err
			}
			continue
		}
		if err != nil {
			return res, fmt.Errorf("try %d: %w", i+1, err)
		}
		res.Took = append(res.Took, took)
		res.Outages = append(res.Outages, outage)
		progress("(%s) %s try %d: %s killed, moved after %s, longest gap %s\n", t.letter, res.Name, i+1, victim, took, outage)
		if err := c.restore(ctx, how, victim); err != nil {
			return res, err
		}
	}
	if w != nil {
		res.Doubles, res.Rounds = len(w.Doubles()), w.Rounds()
	}
	return res, nil
}

// render writes the table's section from its record alone.
func (t annTable) render(rec *record[annData]) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nsvcnet vs MetalLB. %s\n\n", t.title, rec.provenance())
	b.WriteString(t.intro(rec) + "\n\n")
	b.WriteString("| announcer, mode, fault | moved median | moved range | longest gap median | longest gap range | never moved (30 s) | two nodes answering |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rec.Data.Rows {
		t.writeRow(&b, r)
	}
	if len(charted(rec.Data.Rows)) > 0 {
		fmt.Fprintf(&b, "\n![(%s) the moved times of each row's tries, drawn from the record](img/%s)\n", t.letter, t.failoverFigureName())
	}
	if l := rec.loadNote(); l != "" {
		b.WriteString("\n" + l + "\n")
	}
	b.WriteString(t.note)
	return b.String()
}

func annIntroIPv4(rec *record[annData]) string {
	s := rec.Data.Settings
	return fmt.Sprintf("Three nodes, each running `svcnet agent` (nftables) inside its network namespace as the DaemonSet's hostNetwork Pod would, "+
		"a LoadBalancer Service with an endpoint on every node, and a client that opens a new connection every %s with a %s timeout, "+
		"whether the ones before it were answered or not. "+
		"The announcer is svcnet's agent, or MetalLB's speaker (%s, built from its Go module) on every node beside an agent that then only forwards; "+
		"the address comes from svcnet's pool in both. The speakers run as MetalLB's manifests run them: memberlist on (its LAN defaults), "+
		"native BGP, and with BFD its FRR mode (MetalLB has BFD there only): FRR in each node's namespace, its configuration written by the speaker "+
		"and applied by the benchmark's reloader, which restarts the node's FRR on a new file where MetalLB's runs frr-reload.py. "+
		"\"heartbeat frames dropped\": the fabric's bridge drops EtherType 0x88B5, so svcnet's agents hear each other by UDP alone. "+
		"The node carrying the client's traffic (L2: the one whose MAC the client's neighbour entry holds; BGP: the next hop FRR picks "+
		"for the client's flow) is killed, its announcer by SIGKILL or its link cut on the fabric, and the time is from the kill to the first "+
		"successful connection carried by another node (L2: the client's neighbour entry names another node's MAC; BGP: the router's route "+
		"for the flow has another next hop). \"longest gap\" is the longest time without a successful connection. The router sends no ICMP redirects: on this one segment "+
		"they would send the client straight to a node, past the router's failover. svcnet L2: heartbeats every %s, "+
		"a peer dead after %s. BGP, both: keepalive %s, hold time %s, and BFD in the rows that say so, at the interval and multiplier they name on both ends "+
		"(%s x %d is MetalLB's BFDProfile default and svcnet's; FRR's bfdd on the router); svcnet: graceful restart %s. A listener on the segment asks who has "+
		"the address every %s and counts questions answered by two nodes. %d tries of a link cut, %d of a SIGKILL; figures are the median "+
		"and the range (smallest to largest) of the tries.",
		fmtTimer(s.ProbeEvery), fmtTimer(s.ProbeTimeout), rec.Tools["metallb"], fmtTimer(s.Heartbeat), fmtTimer(s.DeadAfter), fmtTimer(s.Keepalive),
		fmtTimer(s.Hold), fmtTimer(s.BFDInterval), s.BFDMultiplier, fmtTimer(s.GracefulRestart), fmtTimer(s.ProbeEvery), s.Tries, s.KillTries)
}

func annIntroIPv6(rec *record[annData]) string {
	s := rec.Data.Settings
	return fmt.Sprintf("The failover benchmark of (o) on a fabric with IPv6 alone: nodes (%s), Pods, Services, client, router and pool (%s) "+
		"have IPv6 addresses only. L2 is NDP: the new carrier's unsolicited Neighbor Advertisement moves the client's neighbour entry, and the "+
		"listener on the segment sends a Neighbor Solicitation every %s. BGP runs over IPv6 sessions to the router, whose routes to the "+
		"address name the nodes' IPv6 next hops; the client sends no flow label (net.ipv6.auto_flowlabels=0), which the router's multipath "+
		"hash would otherwise take in, so that all its connections take one next hop as on IPv4. MetalLB's native BGP does not announce "+
		"IPv6, so its BGP rows run its FRR mode, with and without BFD, each node's BGPPeer naming a router ID; a SIGKILLed speaker then "+
		"leaves FRR's sessions and routes in place. The client opens a new connection every %s with a %s timeout; svcnet L2: heartbeats "+
		"every %s, a peer dead after %s; BGP, both: keepalive %s, hold time %s, BFD %s x %d; svcnet: graceful restart %s; MetalLB %s. "+
		"%d tries of a link cut, %d of a SIGKILL; figures are the median and the range (smallest to largest) of the tries.",
		s.NodeIPs, s.Pool, fmtTimer(s.ProbeEvery), fmtTimer(s.ProbeEvery), fmtTimer(s.ProbeTimeout), fmtTimer(s.Heartbeat), fmtTimer(s.DeadAfter),
		fmtTimer(s.Keepalive), fmtTimer(s.Hold), fmtTimer(s.BFDInterval), s.BFDMultiplier, fmtTimer(s.GracefulRestart), rec.Tools["metallb"],
		s.Tries, s.KillTries)
}

func (t annTable) writeRow(b *strings.Builder, r annResult) {
	if r.NotMeasured != "" {
		fmt.Fprintf(b, "| (%s) %s | not measured: %s | | | | | |\n", t.letter, r.Name, r.NotMeasured)
		return
	}
	doubles := "-"
	if r.Rounds > 0 {
		doubles = fmt.Sprintf("%d of %d questions", r.Doubles, r.Rounds)
	}
	stuck := fmt.Sprintf("%d of %d", r.Stuck, r.Stuck+len(r.Took))
	if len(r.Took) == 0 {
		fmt.Fprintf(b, "| (%s) %s | | | | | %s | %s |\n", t.letter, r.Name, stuck, doubles)
		return
	}
	if !slices.ContainsFunc(r.Took, func(d time.Duration) bool { return d > 0 }) {
		fmt.Fprintf(b, "| (%s) %s | nothing moves (the routes stay) | | %s | %s | %s | %s |\n", t.letter, r.Name, fmtDur(durMedian(r.Outages)), durRange(r.Outages), stuck, doubles)
		return
	}
	fmt.Fprintf(b, "| (%s) %s | %s | %s | %s | %s | %s | %s |\n", t.letter, r.Name, fmtDur(durMedian(r.Took)), durRange(r.Took), fmtDur(durMedian(r.Outages)), durRange(r.Outages), stuck, doubles)
}

// durMedian is median of durations.
func durMedian(ds []time.Duration) time.Duration {
	vs := make([]float64, len(ds))
	for i, d := range ds {
		vs[i] = float64(d)
	}
	return time.Duration(median(vs))
}

// durRange is "smallest-largest of N".
func durRange(ds []time.Duration) string {
	return fmt.Sprintf("%d-%d ms of %d", slices.Min(ds).Milliseconds(), slices.Max(ds).Milliseconds(), len(ds))
}

// fmtTimer writes a setting: whole seconds as "3 s", else milliseconds.
func fmtTimer(d time.Duration) string {
	if d%time.Second == 0 {
		return fmtSeconds(d)
	}
	return fmtDur(d)
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// metallbVersion is the version `make metallb` built.
func metallbVersion(root string) string {
	v, err := os.ReadFile(filepath.Join(root, "bin/metallb/VERSION"))
	if err != nil {
		return "version unknown"
	}
	return strings.TrimSpace(string(v))
}

const annNote = `
How to read it: svcnet's L2 "moved" is its dead interval plus up to one heartbeat interval plus the gratuitous ARP's flight;
MetalLB's is memberlist's detection of a dead member (probes, then suspicion) and then its new owner's gratuitous ARP. A SIGKILLed
announcer's node keeps its forwarding rules, so the client's connections keep working through it until its neighbour entry moves. BGP
without BFD moves when the router's hold timer expires after a cut, the last keepalive having arrived up to one keepalive interval
before it; with BFD, when the router has missed the node's BFD packets for the detection time (multiplier times interval). A
SIGKILLed svcnet agent under graceful restart moves nothing, with BFD or without (its TCP session closes as it dies, which starts
graceful restart before BFD notices): the router keeps its routes and its node keeps forwarding.
A SIGKILLed MetalLB speaker closes its BGP sessions as the process dies (no graceful restart), so the router withdraws its routes at once.
`
