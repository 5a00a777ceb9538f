// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/svcnet-io/svcnet/internal/lbclass"

	"github.com/spf13/pflag"
)

// Options are the speaker's flags of `svcnet agent`.
type Options struct {
	// Enabled runs the speaker.
	Enabled bool
	// HeartbeatInterval is how often an agent tells its L2 segment it is
	// alive and what it answers for.
	HeartbeatInterval time.Duration
	// DeadAfter is how long a silent peer on a segment counts as alive;
	// the L2 failover time is about DeadAfter plus one interval.
	DeadAfter time.Duration
	// Serve is which LoadBalancer Services' addresses it announces, by
	// class: the manager's --load-balancer-class and
	// --load-balancer-class-only, which the agent takes too.
	Serve lbclass.Selection
	// LivenessPort is the UDP port of the L2 heartbeats' second path,
	// unicast to the peers' InternalIPs, for segments that drop raw
	// frames; 0 turns it off.
	LivenessPort int
	// SecretNamespace is where the BGP peers' password Secrets are: the
	// agents' own namespace.
	SecretNamespace string
}

// DefaultSecretNamespace is where the agents' Secrets are when neither
// --announce-secret-namespace nor POD_NAMESPACE says.
const DefaultSecretNamespace = "svcnet-system"

// DefaultLivenessPort is the L2 heartbeats' UDP port: next to the 7946
// of MetalLB's memberlist, so that both can run during a migration.
const DefaultLivenessPort = 7947

// DefaultOptions are announcing on, 100 ms heartbeats, dead after 500 ms,
// heartbeats also by UDP on DefaultLivenessPort,
// and the Secrets in the agent's namespace (POD_NAMESPACE, which the
// manifests set from the Downward API), else svcnet-system.
func DefaultOptions() Options {
	return Options{Enabled: true, HeartbeatInterval: 100 * time.Millisecond, DeadAfter: 500 * time.Millisecond, LivenessPort: DefaultLivenessPort, Serve: lbclass.DefaultSelection(),
		SecretNamespace: cmp.Or(os.Getenv("POD_NAMESPACE"), DefaultSecretNamespace)}
}

// AddFlags binds the options to fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "announce", o.Enabled, "Announce LoadBalancer addresses as the accepted LoadBalancerAnnouncements say (L2: ARP/NDP, BGP).")
	fs.DurationVar(&o.HeartbeatInterval, "announce-heartbeat-interval", o.HeartbeatInterval, "Interval of the heartbeats agents send on each L2 segment they announce on.")
	fs.DurationVar(&o.DeadAfter, "announce-dead-after", o.DeadAfter, "How long an L2 peer may be silent before its addresses move (also how long an agent listens before it answers after a start).")
	fs.IntVar(&o.LivenessPort, "announce-liveness-port", o.LivenessPort, "UDP port on which agents also send their L2 heartbeats to each other's InternalIPs, for segments that drop raw Ethernet frames (EtherType 0x88B5); 0 turns the UDP path off.")
	fs.StringVar(&o.SecretNamespace, "announce-secret-namespace", o.SecretNamespace, "Namespace of the Secrets holding the BGP peers' passwords (passwordSecretRef); default: $POD_NAMESPACE, else svcnet-system.")
	o.Serve.AddFlags(fs, "announce")
}

// Validate checks the options, naming the bad flag.
func (o *Options) Validate() error {
	var errs []error
	if o.SecretNamespace == "" {
		errs = append(errs, errors.New("--announce-secret-namespace must name a namespace"))
	}
	if o.HeartbeatInterval <= 0 {
		errs = append(errs, fmt.Errorf("--announce-heartbeat-interval must be positive, got %s", o.HeartbeatInterval))
	}
	if o.LivenessPort < 0 || o.LivenessPort > 65535 {
		errs = append(errs, fmt.Errorf("--announce-liveness-port must be a port (1-65535) or 0 for none, got %d", o.LivenessPort))
	}
	if o.DeadAfter < 2*o.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("--announce-dead-after (%s) must be at least twice --announce-heartbeat-interval (%s)", o.DeadAfter, o.HeartbeatInterval))
	}
	return errors.Join(errs...)
}
