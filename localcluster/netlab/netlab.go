// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package netlab builds networks of network namespaces: a fabric bridge,
// nodes attached to it (each routing its own Pod CIDR to the others), Pods
// wired to their node by veth, and clients outside the nodes. Kernel tests
// and `svcnet up` build their simulated clusters with it. It creates
// namespaces, links and routes only inside namespaces it made (veths are
// created in place, never in the caller's own namespace), and removes them
// on Close; CleanStale removes what a crashed run left behind.
package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Dir is where `ip netns` keeps its named namespaces.
const Dir = "/run/netns"

// Lab is a set of network namespaces that belong together.
type Lab struct {
	prefix string
	fabric string

	mu         sync.Mutex
	namespaces []string
	pods       []*Pod
	listeners  []net.Listener
	// refusers are the fabric's RefuseUnserved addresses, one a family.
	refusers []netip.Addr
}

// New creates the fabric: a namespace with a bridge that nodes and clients
// plug into. Every name starts with prefix and a dash, so `ip netns list`
// shows them together.
func New(prefix string) (*Lab, error) {
	l := &Lab{prefix: prefix}
	fabric, err := l.addNetns("fabric")
	if err != nil {
		return nil, err
	}
	l.fabric = fabric
	if err := l.batch(fabric, [][]string{{"link", "add", "br0", "type", "bridge"}, {"link", "set", "br0", "up"}}); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// EtcDir is where `ip netns exec` finds a namespace's own /etc files
// (EtcDir/<name>/resolv.conf is bind-mounted over /etc/resolv.conf).
const EtcDir = "/etc/netns"

// SetResolvConf gives namespace ns its own resolver file for `ip netns
// exec`; it goes with the namespace.
func (l *Lab) SetResolvConf(ns string, data []byte) error {
	dir := filepath.Join(EtcDir, ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "resolv.conf"), data, 0o644)
}

// removeEtc removes a namespace's /etc files, if it has any.
func removeEtc(ns string) error {
	return os.RemoveAll(filepath.Join(EtcDir, ns))
}

// Path is the file of a namespace, for nsenter and setns.
func Path(name string) string { return filepath.Join(Dir, name) }

// Fabric is the name of the fabric's namespace.
func (l *Lab) Fabric() string { return l.fabric }

// roleRE matches the namespace names a lab gives after its prefix.
var roleRE = regexp.MustCompile(`^-(fabric|control-plane|router|client.*|node.*|pod-.*)$`)

// CleanStale deletes every namespace that a lab with this prefix would
// have made: what a killed process left behind. Namespaces of a lab with a
// longer prefix (prefix "svcnet" vs "svcnet-2") are not touched.
func CleanStale(prefix string) ([]string, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !roleRE.MatchString(rest) {
			continue
		}
		if err := netns.Delete(Path(e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, removeEtc(e.Name()))
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

func (l *Lab) addNetns(role string) (string, error) {
	name := l.prefix + "-" + role
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	l.mu.Lock()
	l.namespaces = append(l.namespaces, name)
	l.mu.Unlock()
	if err := l.batch(name, [][]string{{"link", "set", "lo", "up"}}); err != nil {
		return "", err
	}
	return name, nil
}

// delNetns deletes one namespace of the lab.
func (l *Lab) delNetns(name string) error {
	l.mu.Lock()
	l.namespaces = slices.DeleteFunc(l.namespaces, func(n string) bool { return n == name })
	l.mu.Unlock()
	return netns.Delete(Path(name))
}

// Run runs a command inside a namespace ("" = the current one) and
// returns its output.
func (l *Lab) Run(ns string, argv ...string) (string, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// run is Run for steps whose output does not matter.
func (l *Lab) run(ns string, argv ...string) error {
	_, err := l.Run(ns, argv...)
	return err
}

// batch runs `ip` commands in a namespace with one process (ip -batch).
func (l *Lab) batch(ns string, cmds [][]string) error {
	var in strings.Builder
	for _, c := range cmds {
		in.WriteString(strings.Join(c, " "))
		in.WriteByte('\n')
	}
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch (%s): %w: %s", ns, strings.ReplaceAll(strings.TrimSpace(in.String()), "\n", "; "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// vethPair creates a veth pair from inside nsA with its peer placed in nsB,
// so it never appears in the caller's namespace.
func (l *Lab) vethPair(nsA, nameA, nsB, nameB string) error {
	if err := l.batch(nsA, [][]string{
		{"link", "add", nameA, "type", "veth", "peer", "name", nameB, "netns", nsB},
		{"link", "set", nameA, "up"},
	}); err != nil {
		return err
	}
	return l.batch(nsB, [][]string{{"link", "set", nameB, "up"}})
}

// attach plugs a new namespace into the fabric with an address.
func (l *Lab) attach(ns, iface string, addr netip.Prefix) error {
	port := "p-" + strings.TrimPrefix(ns, l.prefix+"-")
	if len(port) > 15 {
		port = port[:15]
	}
	if err := l.vethPair(l.fabric, port, ns, iface); err != nil {
		return err
	}
	if err := l.batch(l.fabric, [][]string{{"link", "set", port, "master", "br0"}}); err != nil {
		return err
	}
	return l.batch(ns, [][]string{addrAdd(addr, iface)})
}

// addrAdd is the `ip addr add` of addr on iface; an IPv6 address skips
// duplicate address detection, which would keep it unusable for a second
// or more on a segment where nobody else can hold it.
func addrAdd(addr netip.Prefix, iface string) []string {
	cmd := []string{"addr", "add", addr.String(), "dev", iface}
	if addr.Addr().Is6() {
		cmd = append(cmd, "nodad")
	}
	return cmd
}

// RefuseUnserved makes the fabric itself own ranges (with addr on its
// bridge): a connection a node sends there because no rule of its own
// caught it is refused at once instead of timing out. Benchmarks use it to
// notice the first moment a node serves a ClusterIP. IPv4 ranges are
// routed on-link from the nodes, as the fabric answers ARP for a local
// route; NDP is answered for configured addresses only, so nodes added
// later send IPv6 ranges to addr. Call it once per family.
func (l *Lab) RefuseUnserved(addr netip.Prefix, ranges ...netip.Prefix) error {
	cmds := [][]string{addrAdd(addr, "br0")}
	for _, r := range ranges {
		cmds = append(cmds, []string{"route", "add", "local", r.String(), "dev", "lo"})
	}
	if err := l.batch(l.fabric, cmds); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusers = append(l.refusers, addr.Addr())
	return nil
}

// refuserOf is the fabric's RefuseUnserved address of a's family; invalid
// when there is none.
func (l *Lab) refuserOf(a netip.Addr) netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.refusers {
		if r.Is4() == a.Is4() {
			return r
		}
	}
	return netip.Addr{}
}

// RouteVia adds a route in namespace ns to dst through one or more
// gateways (several: an ECMP route, each flow hashed to one of them).
func (l *Lab) RouteVia(ns string, dst netip.Prefix, via ...netip.Addr) error {
	cmd := []string{"route", "replace", dst.String()}
	if len(via) == 1 {
		cmd = append(cmd, "via", via[0].String())
	} else {
		for _, v := range via {
			cmd = append(cmd, "nexthop", "via", v.String())
		}
	}
	return l.batch(ns, [][]string{cmd})
}

// Node is a simulated node: a namespace on the fabric that routes its Pod
// CIDRs and forwards. A dual-stack node (AddFamily) has an address and a
// Pod CIDR of each family.
type Node struct {
	lab   *Lab
	Name  string
	NetNS string
	// IP and PodCIDR are the node's first family's, IPs and PodCIDRs
	// every family's, the first family first (as a Node's podCIDR and
	// podCIDRs): PodCIDRs[i] is of IPs[i]'s family.
	IP       netip.Addr
	PodCIDR  netip.Prefix
	IPs      []netip.Addr
	PodCIDRs []netip.Prefix

	mu    sync.Mutex
	links int // veths made, for unique interface names
	ips   int // addresses AddPod handed out
}

// gatewayIP is the address Pods use as their IPv4 default gateway; every
// node holds it on lo, so a Pod's ARP for it is answered by its own node.
// IPv6 Pods use gatewayIPv6, which the node's end of each Pod's veth
// holds: NDP is answered only for an address of the link asked on.
const (
	gatewayIP   = "169.254.1.1"
	gatewayIPv6 = "fe80::1"
)

// AddNode creates a node with an address on the fabric and a Pod CIDR.
// serviceCIDRs are routed out of the node's interface, as a real node's
// default route would: the node's own traffic to a cluster IP then carries
// the node's address, so that it is DNATed and, for a REJECT, receives the
// ICMP answer.
func (l *Lab) AddNode(name string, ip netip.Prefix, podCIDR netip.Prefix, serviceCIDRs ...netip.Prefix) (*Node, error) {
	ns, err := l.addNetns(name)
	if err != nil {
		return nil, err
	}
	if err := l.attach(ns, "eth0", ip); err != nil {
		return nil, err
	}
	for _, s := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"},
		{"sysctl", "-qw", "net.ipv4.conf.default.rp_filter=0"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
	} {
		if err := l.run(ns, s...); err != nil {
			return nil, err
		}
	}
	if err := l.batch(ns, [][]string{{"addr", "add", gatewayIP + "/32", "dev", "lo"}}); err != nil {
		return nil, err
	}
	n := &Node{lab: l, Name: name, NetNS: ns, IP: ip.Addr(), PodCIDR: podCIDR}
	n.IPs, n.PodCIDRs = []netip.Addr{ip.Addr()}, []netip.Prefix{podCIDR}
	if err := n.routeServices(ip.Addr(), serviceCIDRs); err != nil {
		return nil, err
	}
	return n, nil
}

// AddFamily makes n dual-stack: ip, of the family n does not have yet, on
// its fabric interface, podCIDR of that family for its Pods, and the
// serviceCIDRs of that family routed as AddNode routes them.
func (n *Node) AddFamily(ip netip.Prefix, podCIDR netip.Prefix, serviceCIDRs ...netip.Prefix) error {
	if ip.Addr().Is4() == n.IP.Is4() || ip.Addr().Is4() != podCIDR.Addr().Is4() {
		return fmt.Errorf("node %s: a second family needs an address and a Pod CIDR of the family it does not have (%s, %s)", n.Name, ip, podCIDR)
	}
	if err := n.lab.batch(n.NetNS, [][]string{addrAdd(ip, "eth0")}); err != nil {
		return err
	}
	if err := n.routeServices(ip.Addr(), serviceCIDRs); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.IPs, n.PodCIDRs = append(n.IPs, ip.Addr()), append(n.PodCIDRs, podCIDR)
	return nil
}

// routeServices routes the Service ranges of from's family out of eth0:
// on-link, or for IPv6 to the fabric's RefuseUnserved address when it has
// one (RefuseUnserved says why).
func (n *Node) routeServices(from netip.Addr, serviceCIDRs []netip.Prefix) error {
	var cmds [][]string
	var via netip.Addr
	if from.Is6() {
		via = n.lab.refuserOf(from)
	}
	for _, s := range serviceCIDRs {
		if s.Addr().Is4() != from.Is4() {
			continue
		}
		cmd := []string{"route", "add", s.String()}
		if via.IsValid() {
			cmd = append(cmd, "via", via.String())
		}
		cmds = append(cmds, append(cmd, "dev", "eth0"))
	}
	if len(cmds) == 0 {
		return nil
	}
	return n.lab.batch(n.NetNS, cmds)
}

// Route makes n reach other's Pods through other's fabric address of each
// family both have.
func (n *Node) Route(other *Node) error {
	for i, cidr := range other.PodCIDRs {
		if !n.has(other.IPs[i]) {
			continue
		}
		if err := n.lab.RouteVia(n.NetNS, cidr, other.IPs[i]); err != nil {
			return err
		}
	}
	return nil
}

// has tells whether n has an address of a's family.
func (n *Node) has(a netip.Addr) bool {
	return slices.ContainsFunc(n.IPs, func(b netip.Addr) bool { return b.Is4() == a.Is4() })
}

// Pod is a network namespace wired to its node, with servers in it.
type Pod struct {
	Name  string
	NetNS string
	// IP is the Pod's first address, IPs all of them (one a family).
	IP   netip.Addr
	IPs  []netip.Addr
	Node *Node
	// hostIface is the node's end of the Pod's veth.
	hostIface string

	mu      sync.Mutex
	closers []io.Closer
	removed bool
}

// AddPod creates a Pod on n with the next address of each of its CIDRs, serving
// HTTP on port: every answer is "<pod name> <client ip> <local ip>".
func (n *Node) AddPod(name string, port int) (*Pod, error) {
	n.mu.Lock()
	n.ips++
	idx := n.ips
	n.mu.Unlock()
	var ips []netip.Addr
	for _, cidr := range n.PodCIDRs {
		ip := cidr.Addr()
		for range idx + 1 {
			ip = ip.Next()
		}
		ips = append(ips, ip)
	}
	p, err := n.NewPod(name, ips[0], ips[1:]...)
	if err != nil {
		return nil, err
	}
	err = p.ServeHTTP(port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		local := "-"
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			local, _, _ = net.SplitHostPort(a.String())
		}
		fmt.Fprintf(w, "%s %s %s", name, host, local)
	}))
	if err != nil {
		return nil, errors.Join(err, p.Remove())
	}
	return p, nil
}

// NewPod creates a namespace named after role (prefixed by the lab's
// prefix) with address ip, and one of the other family for a dual-stack
// Pod, wired to n by a veth and routed from n. It serves nothing until
// ServeHTTP or ServeUDP.
func (n *Node) NewPod(role string, ip netip.Addr, more ...netip.Addr) (*Pod, error) {
	l := n.lab
	n.mu.Lock()
	n.links++
	hostSide := fmt.Sprintf("vp%d", n.links)
	n.mu.Unlock()
	// Pods come and go often: the namespace is made and wired in-process.
	ns := l.prefix + "-" + role
	if err := netns.Create(Path(ns)); err != nil {
		return nil, err
	}
	ips := append([]netip.Addr{ip}, more...)
	p := &Pod{Name: role, NetNS: ns, IP: ip, IPs: ips, Node: n, hostIface: hostSide}
	l.mu.Lock()
	l.namespaces = append(l.namespaces, ns)
	l.pods = append(l.pods, p)
	l.mu.Unlock()
	if err := wirePod(n.NetNS, ns, hostSide, ips); err != nil {
		return nil, errors.Join(err, p.Remove())
	}
	return p, nil
}

// ServeHTTP serves h on TCP port inside the Pod, until Remove.
func (p *Pod) ServeHTTP(port int, h http.Handler) error {
	ln, err := netns.Listen(Path(p.NetNS), fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	p.keep(srv)
	return nil
}

// ServeUDP answers every datagram to port inside the Pod with the bytes
// answer returns for its sender, until Remove.
func (p *Pod) ServeUDP(port int, answer func(from net.Addr) []byte) error {
	var pc net.PacketConn
	err := netns.Do(Path(p.NetNS), func() error {
		var err error
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		return err
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(answer(from), from)
		}
	}()
	p.keep(pc)
	return nil
}

func (p *Pod) keep(c io.Closer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.removed {
		_ = c.Close()
		return
	}
	p.closers = append(p.closers, c)
}

// Remove stops the Pod's servers and deletes its namespace; the veth and
// the node's route to it go with the namespace.
func (p *Pod) Remove() error {
	p.mu.Lock()
	if p.removed {
		p.mu.Unlock()
		return nil
	}
	p.removed = true
	closers := p.closers
	p.closers = nil
	p.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	l := p.Node.lab
	l.mu.Lock()
	l.pods = slices.DeleteFunc(l.pods, func(q *Pod) bool { return q == p })
	l.mu.Unlock()
	return l.delNetns(p.NetNS)
}

// AddRange makes every address of prefix belong to the Pod (a local route,
// so no address is configured one by one) and routes it from the node: one
// namespace then stands for as many endpoints as a benchmark needs, and its
// answers name the address each connection reached.
func (p *Pod) AddRange(prefix netip.Prefix) error {
	l := p.Node.lab
	if err := l.batch(p.NetNS, [][]string{{"route", "add", "local", prefix.String(), "dev", "lo"}}); err != nil {
		return err
	}
	return l.batch(p.Node.NetNS, [][]string{{"route", "add", prefix.String(), "dev", p.hostIface}})
}

// AddClient creates a namespace on the fabric outside every node, with
// address ip and, dual-stack, one of the other family.
func (l *Lab) AddClient(name string, ip netip.Prefix, more ...netip.Prefix) (string, error) {
	ns, err := l.addNetns(name)
	if err != nil {
		return "", err
	}
	if err := l.attach(ns, "eth0", ip); err != nil {
		return "", err
	}
	for _, a := range more {
		if err := l.batch(ns, [][]string{addrAdd(a, "eth0")}); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// AddRouter creates a namespace on the fabric that forwards between the
// clients and the nodes and sends no ICMP redirects. On this one segment
// a redirect tells a client to go straight to the next hop the router
// chose, past the router's later choices (the failover benchmark's
// client kept reaching a cut node with them): a fabric's clients sit
// behind their router.
func (l *Lab) AddRouter(name string, ip netip.Prefix, more ...netip.Prefix) (string, error) {
	ns, err := l.AddClient(name, ip, more...)
	if err != nil {
		return "", err
	}
	for _, s := range [][]string{
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"sysctl", "-qw", "net.ipv4.conf.all.send_redirects=0"},
		{"sysctl", "-qw", "net.ipv4.conf.eth0.send_redirects=0"},
	} {
		if err := l.run(ns, s...); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// Client is an HTTP client whose connections start inside a namespace; a
// new connection per request, so that every request is load-balanced anew.
func Client(ns string, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       netns.DialContext(Path(ns)),
			DisableKeepAlives: true,
		},
	}
}

// Get fetches url from inside ns and returns the body.
func Get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

// Forward listens on addr inside namespace ns and copies every connection
// to target, dialled from the caller's namespace: a node's processes reach
// the API server on the caller's loopback at the same address. It stops
// on Close.
func (l *Lab) Forward(ns, addr, target string) error {
	ln, err := netns.Listen(Path(ns), addr)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.listeners = append(l.listeners, ln)
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pipe(c, target)
		}
	}()
	return nil
}

// pipe copies c to a new connection to target and back until either ends.
func pipe(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	relay(c, c, up)
}

// relay copies from (c's bytes, possibly behind a reader that buffered
// some) to up and up's bytes to c until both directions end, passing on
// each side's end of writing.
func relay(c net.Conn, from io.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, from)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	<-done
}

// closeWrite ends c's writing half where the connection has one (TCP,
// unix).
func closeWrite(c net.Conn) {
	if hc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
}

// Close stops the Pods' servers and forwarders and deletes every namespace
// of the lab.
func (l *Lab) Close() {
	l.mu.Lock()
	pods := l.pods
	l.pods = nil
	listeners := l.listeners
	l.listeners = nil
	l.mu.Unlock()
	for _, ln := range listeners {
		_ = ln.Close()
	}
	for _, p := range pods {
		p.mu.Lock()
		p.removed = true
		for _, c := range p.closers {
			_ = c.Close()
		}
		p.closers = nil
		p.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.namespaces) - 1; i >= 0; i-- {
		_ = netns.Delete(Path(l.namespaces[i]))
		_ = removeEtc(l.namespaces[i])
	}
	l.namespaces = nil
}
