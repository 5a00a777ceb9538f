package agent

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strconv"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// forgetUDP queues the UDP endpoints that a Service's old state had and
// its new state (nil when the Service is gone) no longer has.
func (a *Agent) forgetUDP(old, cur *serviceState) {
	for key, o := range old.udp {
		var now map[netip.Addr]bool
		if cur != nil {
			now = cur.udp[key].endpoints
		}
		gone := udpPort{dests: o.dests, nodePort: o.nodePort, endpoints: map[netip.Addr]bool{}}
		for ep := range o.endpoints {
			if !now[ep] {
				gone.endpoints[ep] = true
			}
		}
		if len(gone.endpoints) > 0 {
			a.staleUDP = append(a.staleUDP, gone)
		}
	}
}

// clearStaleUDP deletes the conntrack entries that still send UDP traffic
// of a service port to an endpoint that is no longer programmed; without
// this, a client reusing its source port keeps talking to a gone Pod.
// TCP needs nothing: its connections fail and are retried.
func (a *Agent) clearStaleUDP(ctx context.Context) {
	for _, u := range a.staleUDP {
		for ep := range u.endpoints {
			for _, dst := range u.dests {
				a.conntrack(ctx, "-D", "-f", familyFlag(ep), "-p", "udp", "--orig-dst", dst, "--dst-nat", ep.String())
			}
			if u.nodePort != 0 {
				a.conntrack(ctx, "-D", "-f", familyFlag(ep), "-p", "udp", "--orig-port-dst", strconv.Itoa(int(u.nodePort)), "--dst-nat", ep.String())
			}
		}
	}
	a.staleUDP = nil
}

func (a *Agent) conntrack(ctx context.Context, args ...string) {
	// Started from a thread in --netns, conntrack works on that namespace.
	cmd := exec.CommandContext(ctx, "conntrack", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := netns.Run(a.opts.NetNS, cmd)
	// conntrack exits 1 when nothing matched, which is the common case.
	var exitErr *exec.ExitError
	if err != nil && (!errors.As(err, &exitErr) || exitErr.ExitCode() != 1) {
		a.log.V(2).Info("Clearing conntrack entries failed", "args", args, "err", err.Error(), "output", out.String())
	}
}

func familyFlag(ip netip.Addr) string {
	if ip.Is6() {
		return "ipv6"
	}
	return "ipv4"
}
