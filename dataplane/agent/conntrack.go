package agent

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strconv"
)

// clearStaleUDP deletes the conntrack entries that still send UDP traffic
// of a service port to an endpoint that is no longer programmed; without
// this, a client reusing its source port keeps talking to a gone Pod.
// TCP needs nothing: its connections fail and are retried.
func (a *Agent) clearStaleUDP(ctx context.Context, now map[string]udpPort) {
	a.mu.Lock()
	prev := a.udp
	a.udp = now
	a.mu.Unlock()
	for key, old := range prev {
		cur := now[key]
		for ep := range old.endpoints {
			if cur.endpoints[ep] {
				continue
			}
			for _, dst := range old.dests {
				a.conntrack(ctx, "-D", "-f", familyFlag(ep), "-p", "udp", "--orig-dst", dst, "--dst-nat", ep.String())
			}
			if old.nodePort != 0 {
				a.conntrack(ctx, "-D", "-f", familyFlag(ep), "-p", "udp", "--orig-port-dst", strconv.Itoa(int(old.nodePort)), "--dst-nat", ep.String())
			}
		}
	}
}

func (a *Agent) conntrack(ctx context.Context, args ...string) {
	argv := []string{"conntrack"}
	if a.opts.NetNS != "" {
		argv = []string{"nsenter", "--net=" + a.opts.NetNS, "--", "conntrack"}
	}
	argv = append(argv, args...)
	// conntrack exits 1 when nothing matched, which is the common case.
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && (!errors.As(err, &exitErr) || exitErr.ExitCode() != 1) {
		a.log.V(2).Info("Clearing conntrack entries failed", "args", args, "err", err.Error(), "output", string(out))
	}
}

func familyFlag(ip netip.Addr) string {
	if ip.Is6() {
		return "ipv6"
	}
	return "ipv4"
}
