// Package netlab builds small networks of network namespaces for kernel
// tests: a fabric bridge, nodes attached to it (each routing its own Pod
// CIDR to the others), Pods wired to their node by veth with an HTTP
// server that answers with the Pod's name, the client's address and the
// address it was reached on, and
// clients outside the nodes. It only ever creates namespaces, links and
// routes inside the namespaces it made, and removes them on Close.
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
	"strings"
	"sync"
	"time"

	"github.com/svcnet-io/svcnet/internal/netns"
)

// Lab is a set of network namespaces that belong together.
type Lab struct {
	prefix string
	fabric string

	mu         sync.Mutex
	namespaces []string
	servers    []*http.Server
	veths      int
}

// New creates the fabric: a namespace with a bridge that nodes and clients
// plug into. Names start with prefix, so `ip netns list` shows them.
func New(prefix string) (*Lab, error) {
	l := &Lab{prefix: prefix}
	fabric, err := l.addNetns("fabric")
	if err != nil {
		return nil, err
	}
	l.fabric = fabric
	if err := l.run(fabric, "ip", "link", "add", "br0", "type", "bridge"); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.run(fabric, "ip", "link", "set", "br0", "up"); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Path is the file of a namespace, for nsenter and setns.
func Path(name string) string { return filepath.Join("/run/netns", name) }

func (l *Lab) addNetns(role string) (string, error) {
	name := l.prefix + "-" + role
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %w: %s", name, err, out)
	}
	l.mu.Lock()
	l.namespaces = append(l.namespaces, name)
	l.mu.Unlock()
	if err := l.run(name, "ip", "link", "set", "lo", "up"); err != nil {
		return "", err
	}
	return name, nil
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

// vethPair creates a veth pair with one end in each namespace.
func (l *Lab) vethPair(nsA, nameA, nsB, nameB string) error {
	l.mu.Lock()
	l.veths++
	tmp := fmt.Sprintf("vtmp%d", l.veths)
	l.mu.Unlock()
	steps := [][]string{
		{"ip", "link", "add", tmp + "a", "type", "veth", "peer", "name", tmp + "b"},
		{"ip", "link", "set", tmp + "a", "netns", nsA},
		{"ip", "link", "set", tmp + "b", "netns", nsB},
	}
	for _, s := range steps {
		if err := l.run("", s...); err != nil {
			return err
		}
	}
	if err := l.run(nsA, "ip", "link", "set", tmp+"a", "name", nameA); err != nil {
		return err
	}
	if err := l.run(nsB, "ip", "link", "set", tmp+"b", "name", nameB); err != nil {
		return err
	}
	if err := l.run(nsA, "ip", "link", "set", nameA, "up"); err != nil {
		return err
	}
	return l.run(nsB, "ip", "link", "set", nameB, "up")
}

// attach plugs a new namespace into the fabric with an address.
func (l *Lab) attach(ns, iface string, addr netip.Prefix) error {
	port := "p-" + strings.TrimPrefix(ns, l.prefix+"-")
	if len(port) > 15 {
		port = port[:15]
	}
	if err := l.vethPair(ns, iface, l.fabric, port); err != nil {
		return err
	}
	if err := l.run(l.fabric, "ip", "link", "set", port, "master", "br0"); err != nil {
		return err
	}
	return l.run(ns, "ip", "addr", "add", addr.String(), "dev", iface)
}

// RefuseUnserved makes the fabric itself own ranges (with addr on its
// bridge, so that it answers ARP): a connection a node sends there because
// no rule of its own caught it is refused at once instead of timing out.
// Benchmarks use it to notice the first moment a node serves a ClusterIP.
func (l *Lab) RefuseUnserved(addr netip.Prefix, ranges ...netip.Prefix) error {
	if err := l.run(l.fabric, "ip", "addr", "add", addr.String(), "dev", "br0"); err != nil {
		return err
	}
	for _, r := range ranges {
		if err := l.run(l.fabric, "ip", "route", "add", "local", r.String(), "dev", "lo"); err != nil {
			return err
		}
	}
	return nil
}

// Node is a simulated node: a namespace on the fabric that routes its Pod
// CIDR and forwards.
type Node struct {
	lab     *Lab
	Name    string
	NetNS   string
	IP      netip.Addr
	PodCIDR netip.Prefix
	pods    int
}

// gatewayIP is the address Pods use as their default gateway; every node
// holds it on lo, so a Pod's ARP for it is answered by its own node.
const gatewayIP = "169.254.1.1"

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
		{"ip", "addr", "add", gatewayIP + "/32", "dev", "lo"},
	} {
		if err := l.run(ns, s...); err != nil {
			return nil, err
		}
	}
	for _, s := range serviceCIDRs {
		if err := l.run(ns, "ip", "route", "add", s.String(), "dev", "eth0"); err != nil {
			return nil, err
		}
	}
	return &Node{lab: l, Name: name, NetNS: ns, IP: ip.Addr(), PodCIDR: podCIDR}, nil
}

// Route makes n reach other's Pods through other's fabric address.
func (n *Node) Route(other *Node) error {
	return n.lab.run(n.NetNS, "ip", "route", "add", other.PodCIDR.String(), "via", other.IP.String())
}

// Pod is a network namespace with an HTTP server.
type Pod struct {
	Name  string
	NetNS string
	IP    netip.Addr
	Node  *Node
	// hostIface is the node's end of the Pod's veth.
	hostIface string
}

// AddPod creates a Pod on n with the next address of its CIDR, serving
// HTTP on port: every answer is "<pod name> <client ip> <local ip>".
func (n *Node) AddPod(name string, port int) (*Pod, error) {
	l := n.lab
	l.mu.Lock()
	n.pods++
	idx := n.pods
	l.mu.Unlock()
	ip := n.PodCIDR.Addr()
	for range idx + 1 {
		ip = ip.Next()
	}
	ns, err := l.addNetns(name)
	if err != nil {
		return nil, err
	}
	hostSide := fmt.Sprintf("veth%s%d", strings.TrimPrefix(n.Name, "node"), idx)
	if len(hostSide) > 15 {
		hostSide = hostSide[:15]
	}
	if err := l.vethPair(ns, "eth0", n.NetNS, hostSide); err != nil {
		return nil, err
	}
	for _, s := range [][]string{
		{"ip", "addr", "add", ip.String() + "/32", "dev", "eth0"},
		{"ip", "route", "add", gatewayIP, "dev", "eth0", "scope", "link"},
		{"ip", "route", "add", "default", "via", gatewayIP, "dev", "eth0"},
	} {
		if err := l.run(ns, s...); err != nil {
			return nil, err
		}
	}
	if err := l.run(n.NetNS, "ip", "route", "add", ip.String()+"/32", "dev", hostSide); err != nil {
		return nil, err
	}
	ln, err := netns.Listen(Path(ns), fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			local := "-"
			if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
				local, _, _ = net.SplitHostPort(a.String())
			}
			fmt.Fprintf(w, "%s %s %s", name, host, local)
		}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	l.mu.Lock()
	l.servers = append(l.servers, srv)
	l.mu.Unlock()
	return &Pod{Name: name, NetNS: ns, IP: ip, Node: n, hostIface: hostSide}, nil
}

// AddRange makes every address of prefix belong to the Pod (a local route,
// so no address is configured one by one) and routes it from the node: one
// namespace then stands for as many endpoints as a benchmark needs, and its
// answers name the address each connection reached.
func (p *Pod) AddRange(prefix netip.Prefix) error {
	l := p.Node.lab
	if err := l.run(p.NetNS, "ip", "route", "add", "local", prefix.String(), "dev", "lo"); err != nil {
		return err
	}
	return l.run(p.Node.NetNS, "ip", "route", "add", prefix.String(), "dev", p.hostIface)
}

// AddClient creates a namespace on the fabric outside every node.
func (l *Lab) AddClient(name string, ip netip.Prefix) (string, error) {
	ns, err := l.addNetns(name)
	if err != nil {
		return "", err
	}
	return ns, l.attach(ns, "eth0", ip)
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

// Close stops the servers and deletes every namespace of the lab.
func (l *Lab) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.servers {
		_ = s.Close()
	}
	for i := len(l.namespaces) - 1; i >= 0; i-- {
		_ = exec.Command("ip", "netns", "del", l.namespaces[i]).Run()
	}
	l.namespaces = nil
}

// InPrivateNetNS re-executes the current test binary inside fresh network
// and mount namespaces (so that nothing it does reaches the host's
// networking, and `ip netns` bind mounts stay private), unless it already
// runs there. It returns a non-empty reason when that is impossible, in
// which case kernel tests must skip. Call it first in TestMain; when it
// re-executed, it exits with the child's status and does not return.
func InPrivateNetNS() (skipReason string) {
	const marker = "SVCNET_IN_PRIVATE_NETNS"
	if os.Getenv(marker) == "1" {
		if err := setupPrivate(); err != nil {
			return "setting up the private namespace: " + err.Error()
		}
		return ""
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return "unshare (util-linux) is not installed"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) is not installed"
	}
	if out, err := exec.Command("unshare", "--net", "--mount", "true").CombinedOutput(); err != nil {
		return fmt.Sprintf("cannot create network namespaces here (needs root or user namespaces): %v: %s", err, strings.TrimSpace(string(out)))
	}
	args := append([]string{"--net", "--mount", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			os.Exit(exitErr.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "running tests in a private network namespace:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return ""
}

func setupPrivate() error {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, out)
	}
	// A private /run/netns: `ip netns add` mounts land here, not on the host.
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "svcnet-netns", "/run/netns").CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a private /run/netns: %w: %s", err, out)
	}
	return nil
}
