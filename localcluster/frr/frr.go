// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package frr runs a real router, FRR from Debian's packages (unpacked
// into bin/frr by hack/frr/build.sh, never installed), inside a network
// namespace that `svcnet up` or a test made: zebra, bgpd and, when a
// neighbor has BFD, bfdd, with every
// file (configuration, sockets, pid files, logs) in a state folder of
// their own and no vty listening on TCP, peering with the simulated nodes
// and installing the ECMP routes they advertise. It never starts anything
// in the caller's own namespace.
package frr

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// Neighbor is a BGP peer of the router: a node.
type Neighbor struct {
	Addr netip.Addr
	ASN  uint32
	// Password is the session's TCP-MD5 password; empty for none.
	Password string
	// TTLSecurityHops, when set, makes the router drop the neighbor's
	// packets whose TTL is under 256 minus it (GTSM, RFC 5082): a
	// neighbor that sends with TTL 1 never gets a session.
	TTLSecurityHops int
	// BFD, when set, runs a BFD session with the neighbor (bfdd) that
	// takes the BGP session down when it fails.
	BFD *BFD
}

// BFD is a BFD profile of the router.
type BFD struct {
	ReceiveInterval, TransmitInterval time.Duration
	DetectMultiplier                  int
}

// name is the profile's name in bfdd's configuration.
func (b BFD) name() string {
	return fmt.Sprintf("svcnet-%d-%d-%d", b.ReceiveInterval.Milliseconds(), b.TransmitInterval.Milliseconds(), b.DetectMultiplier)
}

// Config is one router.
type Config struct {
	// Root is where hack/frr/build.sh unpacked FRR (bin/frr/root).
	Root string
	// StateDir holds the router's configuration, sockets and logs.
	StateDir string
	// NetNS is the namespace the router runs in; required.
	NetNS    string
	RouterID netip.Addr
	ASN      uint32
	// Neighbors are the nodes; the router connects to each.
	Neighbors []Neighbor
	// Keepalive and Hold are the BGP timers the router asks for.
	Keepalive, Hold time.Duration
}

// Router is a running FRR.
type Router struct {
	cfg   Config
	procs []*exec.Cmd
}

// Available tells whether FRR is unpacked at root, and what to run if not.
func Available(root string) error {
	for _, p := range []string{"usr/lib/frr/zebra", "usr/lib/frr/bgpd", "usr/lib/frr/bfdd", "usr/bin/vtysh"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			return fmt.Errorf("FRR is not unpacked in %s (run make frr): %w", root, err)
		}
	}
	return nil
}

// Start writes the configuration and starts zebra, then bgpd, inside the
// namespace.
func Start(cfg Config) (*Router, error) {
	r, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "bgpd.conf"), []byte(bgpdConf(cfg)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "zebra.conf"), []byte("hostname svcnet-router\n"), 0o644); err != nil {
		return nil, err
	}
	if cfg.hasBFD() {
		if err := os.WriteFile(filepath.Join(cfg.StateDir, "bfdd.conf"), []byte(bfddConf(cfg)), 0o644); err != nil {
			return nil, err
		}
	}
	if err := r.startDaemons(cfg.hasBFD()); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// StartIntegrated runs zebra, bfdd and bgpd in netns with conf, an
// integrated configuration (frr.conf) that another program wrote, as
// FRR's init script boots one: the daemons start with none of their own
// and `vtysh -b` gives each its part. MetalLB's speaker writes one in its
// FRR mode.
func StartIntegrated(root, stateDir, netns, conf string) (*Router, error) {
	r, err := prepare(Config{Root: root, StateDir: stateDir, NetNS: netns})
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"zebra", "bfdd", "bgpd"} {
		if err := os.WriteFile(filepath.Join(stateDir, name+".conf"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(stateDir, "frr.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := r.startDaemons(true); err != nil {
		r.Stop()
		return nil, err
	}
	if out, err := r.vtysh("-b"); err != nil {
		r.Stop()
		return nil, fmt.Errorf("frr: applying %s: %w: %s", filepath.Join(stateDir, "frr.conf"), err, out)
	}
	return r, nil
}

// prepare checks cfg and writes what every daemon and vtysh need in the
// state folder.
func prepare(cfg Config) (*Router, error) {
	if cfg.NetNS == "" {
		return nil, errors.New("frr: a network namespace is required")
	}
	if err := Available(cfg.Root); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	// vtysh (--config_dir here) lets root in without PAM.
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "vtysh.conf"), []byte("username root nopassword\n"), 0o644); err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg}
	return r, r.writeGroupFile()
}

// startDaemons starts zebra, then bfdd (when withBFD) and bgpd, each
// with the configuration file of its name, and waits until each listens
// on its vty socket: bgpd connects to zebra's, and vtysh skips a daemon
// whose socket is not there yet.
func (r *Router) startDaemons(withBFD bool) error {
	names := []string{"zebra", "bgpd"}
	if withBFD {
		names = []string{"zebra", "bfdd", "bgpd"}
	}
	for _, name := range names {
		if err := r.daemon(name); err != nil {
			return err
		}
		if err := r.waitListening(name); err != nil {
			return err
		}
	}
	return nil
}

// waitListening waits for a daemon's vty socket (zebra: also its zserv
// socket, which the other daemons connect to).
func (r *Router) waitListening(name string) error {
	socks := []string{name + ".vty"}
	if name == "zebra" {
		socks = append(socks, "zserv.api")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, sock := range socks {
		for {
			if _, err := os.Stat(filepath.Join(r.cfg.StateDir, sock)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("frr: %s did not start (see %s)", name, filepath.Join(r.cfg.StateDir, name+".log"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func (cfg Config) hasBFD() bool {
	for _, n := range cfg.Neighbors {
		if n.BFD != nil {
			return true
		}
	}
	return false
}

// bfddConf is bfdd's configuration: one profile per distinct setting of
// the neighbors; bgpd asks bfdd for the sessions themselves.
func bfddConf(cfg Config) string {
	var b strings.Builder
	b.WriteString("hostname svcnet-router\n!\nbfd\n")
	seen := map[string]bool{}
	for _, n := range cfg.Neighbors {
		if n.BFD == nil || seen[n.BFD.name()] {
			continue
		}
		seen[n.BFD.name()] = true
		fmt.Fprintf(&b, " profile %s\n  receive-interval %d\n  transmit-interval %d\n  detect-multiplier %d\n exit\n",
			n.BFD.name(), n.BFD.ReceiveInterval.Milliseconds(), n.BFD.TransmitInterval.Milliseconds(), n.BFD.DetectMultiplier)
	}
	b.WriteString("exit\n!\n")
	return b.String()
}

func (r *Router) groupFile() string { return filepath.Join(r.cfg.StateDir, "group") }

// writeGroupFile is this machine's /etc/group with FRR's groups added,
// root a member.
func (r *Router) writeGroupFile() error {
	b, err := os.ReadFile("/etc/group")
	if err != nil {
		return err
	}
	s := strings.TrimRight(string(b), "\n") + "\n"
	for _, g := range []string{"frr:x:64990:root", "frrvty:x:64991:root"} {
		if !strings.Contains(s, "\n"+strings.SplitN(g, ":", 2)[0]+":") {
			s += g + "\n"
		}
	}
	return os.WriteFile(r.groupFile(), []byte(s), 0o644)
}

func (r *Router) env() []string {
	lib := filepath.Join(r.cfg.Root, "usr/lib/x86_64-linux-gnu")
	return append(os.Environ(), "LD_LIBRARY_PATH="+lib+":"+filepath.Join(lib, "frr"))
}

// daemon starts one FRR daemon in the router's namespace: its own config,
// pid file, sockets and log in StateDir, no TCP vty, running as root.
func (r *Router) daemon(name string) error {
	d := r.cfg.StateDir
	args := []string{
		"-f", filepath.Join(d, name+".conf"), "-i", filepath.Join(d, name+".pid"),
		"-z", filepath.Join(d, "zserv.api"), "--vty_socket", d, "-P", "0",
		"-u", "root", "-g", "root", "--log", "file:" + filepath.Join(d, name+".log"),
	}
	switch name {
	case "bgpd":
		args = append(args, "-p", "179")
	case "bfdd":
		args = append(args, "--bfdctl", filepath.Join(d, "bfdd.sock"))
	}
	log, err := os.OpenFile(filepath.Join(d, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	// FRR's daemons insist on their vty group existing; rather than add
	// it to this machine, each runs in a mount namespace of its own where
	// /etc/group has it.
	script := `mount --bind "$0" /etc/group && exec "$@"`
	cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script,
		r.groupFile(), filepath.Join(r.cfg.Root, "usr/lib/frr", name)}, args...)...)
	cmd.Env = r.env()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := netns.Do(r.cfg.NetNS, cmd.Start); err != nil {
		return fmt.Errorf("frr: starting %s: %w", name, err)
	}
	r.procs = append(r.procs, cmd)
	go func() { _ = cmd.Wait() }()
	return nil
}

// bgpdConf is the router's BGP configuration: every node a neighbor of
// the same remote AS, fast timers, ECMP over as many nodes as there are,
// IPv4 and IPv6 unicast.
func bgpdConf(cfg Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "frr defaults traditional\nhostname svcnet-router\n!\nrouter bgp %d\n", cfg.ASN)
	fmt.Fprintf(&b, " bgp router-id %s\n no bgp ebgp-requires-policy\n no bgp network import-check\n bgp bestpath as-path multipath-relax\n", cfg.RouterID)
	peerASN := uint32(0)
	if len(cfg.Neighbors) > 0 {
		peerASN = cfg.Neighbors[0].ASN
	}
	fmt.Fprintf(&b, " neighbor NODES peer-group\n neighbor NODES remote-as %d\n", peerASN)
	fmt.Fprintf(&b, " neighbor NODES timers %d %d\n neighbor NODES timers connect 1\n", int(cfg.Keepalive.Seconds()), int(cfg.Hold.Seconds()))
	var alone []netip.Addr
	for _, n := range cfg.Neighbors {
		// A peer group is all iBGP or all eBGP: one of another AS is
		// configured on its own.
		if n.ASN == peerASN {
			fmt.Fprintf(&b, " neighbor %s peer-group NODES\n", n.Addr)
		} else {
			alone = append(alone, n.Addr)
			fmt.Fprintf(&b, " neighbor %s remote-as %d\n", n.Addr, n.ASN)
			fmt.Fprintf(&b, " neighbor %s timers %d %d\n neighbor %s timers connect 1\n", n.Addr, int(cfg.Keepalive.Seconds()), int(cfg.Hold.Seconds()), n.Addr)
		}
		if n.Password != "" {
			fmt.Fprintf(&b, " neighbor %s password %s\n", n.Addr, n.Password)
		}
		if n.TTLSecurityHops > 0 {
			fmt.Fprintf(&b, " neighbor %s ttl-security hops %d\n", n.Addr, n.TTLSecurityHops)
		}
		if n.BFD != nil {
			fmt.Fprintf(&b, " neighbor %s bfd\n neighbor %s bfd profile %s\n", n.Addr, n.Addr, n.BFD.name())
		}
	}
	for _, af := range []string{"ipv4", "ipv6"} {
		fmt.Fprintf(&b, " address-family %s unicast\n", af)
		if af == "ipv6" {
			b.WriteString("  neighbor NODES activate\n")
		}
		for _, a := range alone {
			fmt.Fprintf(&b, "  neighbor %s activate\n", a)
		}
		b.WriteString("  maximum-paths 64\n exit-address-family\n")
	}
	b.WriteString("!\n")
	return b.String()
}

// Vtysh runs one vtysh command against the router, e.g. "show ip bgp".
func (r *Router) Vtysh(command string) (string, error) {
	out, err := r.vtysh("-c", command)
	if err != nil {
		return out, fmt.Errorf("vtysh -c %q: %w: %s", command, err, out)
	}
	return out, nil
}

// vtysh runs vtysh with args against the router's daemons.
func (r *Router) vtysh(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(r.cfg.Root, "usr/bin/vtysh"), append([]string{"--vty_socket", r.cfg.StateDir, "--config_dir", r.cfg.StateDir}, args...)...)
	cmd.Env = r.env()
	var out []byte
	err := netns.Do(r.cfg.NetNS, func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return string(out), err
}

// VtyshCommand is the command line that runs vtysh against this router
// from a shell, for the tour.
func (r *Router) VtyshCommand() string {
	lib := filepath.Join(r.cfg.Root, "usr/lib/x86_64-linux-gnu")
	return fmt.Sprintf("ip netns exec %s env LD_LIBRARY_PATH=%s:%s/frr %s --vty_socket %s --config_dir %s",
		filepath.Base(r.cfg.NetNS), lib, lib, filepath.Join(r.cfg.Root, "usr/bin/vtysh"), r.cfg.StateDir, r.cfg.StateDir)
}

// Stop kills the daemons.
func (r *Router) Stop() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		if p := r.procs[i].Process; p != nil {
			_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		}
	}
	r.procs = nil
}
