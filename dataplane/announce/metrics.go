// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"net/netip"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/dataplane/announce/bfd"
	"github.com/svcnet-io/svcnet/dataplane/announce/l2"
)

// What this node announces.
var (
	metricAddresses = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_addresses",
		Help: "LoadBalancer addresses this node announces, by mode (l2, bgp) and interface (l2).",
	}, []string{"mode", "interface"})
	metricOwned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_owned",
		Help: "1 for each LoadBalancer address this node announces, by mode.",
	}, []string{"address", "mode"})
	metricTakeovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svcnet_announce_takeovers_total",
		Help: "Addresses this node took over in L2 mode (each followed by gratuitous ARP or unsolicited NA).",
	})
	metricFailover = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "svcnet_announce_failover_seconds",
		Help:    "How long an L2 address may have gone unanswered when this node took it over from another node, by why that node stopped (peer-lost, released): from its last heartbeat claiming the address, or the one letting go of it, to this node's first gratuitous ARP or unsolicited NA.",
		Buckets: FailoverBuckets,
	}, []string{"address", "reason"})
	metricLastFailover = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_last_failover_timestamp_seconds",
		Help: "When this node last took an L2 address over from another node (Unix time of its first announcement).",
	}, []string{"address"})
	metricPeers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_peers",
		Help: "Live peers heard on each L2 interface.",
	}, []string{"interface"})
	metricHeldBack = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_held_back",
		Help: "L2 addresses this node holds back on each interface because it hears no peer there while other candidates are Ready (heartbeats filtered?).",
	}, []string{"interface"})
	metricSessionUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_bgp_session_up",
		Help: "1 when the BGP session with the peer is established.",
	}, []string{"peer"})
	metricBFDSessionUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_bfd_session_up",
		Help: "1 when the BFD session with the BGP peer is Up, 0 otherwise; only peers with bfd set have one.",
	}, []string{"peer"})
	metricBFDTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svcnet_announce_bfd_session_transitions_total",
		Help: "State changes of the BFD session with the BGP peer, by the state entered (AdminDown, Down, Init, Up).",
	}, []string{"peer", "state"})
	metricInterfaceMissing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_interface_missing",
		Help: "1 when an L2 announcement names an interface this node lacks (it does not announce there).",
	}, []string{"announcement", "interface"})
)

// FailoverBuckets are svcnet_announce_failover_seconds' bucket bounds.
// They span a planned hand-off (a millisecond or less: the old owner lets
// go and says so in a heartbeat at once), a lost peer under the default
// flags (--announce-dead-after plus up to an interval: 0.5 to 0.6 s) and
// under slower ones, up to a minute.
// Alerting rules compare against one of them (internal/monitoring).
var FailoverBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, .75, 1, 1.5, 2.5, 5, 10, 30, 60}

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricAddresses, metricOwned, metricTakeovers, metricFailover, metricLastFailover,
			metricPeers, metricHeldBack, metricSessionUp, metricBFDSessionUp, metricBFDTransitions, metricInterfaceMissing)
	})
}

// observeBFDChange counts a BFD session's state change and sets its
// gauge at once, without waiting for the next sync.
func observeBFDChange(c bfd.Change) {
	metricBFDTransitions.WithLabelValues(c.Peer.String(), c.To.String()).Inc()
	metricBFDSessionUp.WithLabelValues(c.Peer.String()).Set(bfdUp(c.To))
}

func bfdUp(s bfd.State) float64 {
	if s == bfd.StateUp {
		return 1
	}
	return 0
}

// syncBFDSeries makes the BFD gauges those of the sessions: a peer
// without BFD has none.
func syncBFDSeries(sessions map[netip.Addr]bfd.State) {
	metricBFDSessionUp.Reset()
	for peer, st := range sessions {
		metricBFDSessionUp.WithLabelValues(peer.String()).Set(bfdUp(st))
	}
}

// failoverSeries are the addresses with failover series: each address
// this node may answer for in L2 mode has them from the moment it is in
// the plan, at zero, so that the first move of an address counts as an
// increase (a series born at 1 is no increase to rate() and increase());
// those of an address that leaves the plan go.
var failoverSeries = struct {
	sync.Mutex
	addrs map[netip.Addr]bool
}{addrs: map[netip.Addr]bool{}}

// failoverReasons are the values of svcnet_announce_failover_seconds'
// reason label.
var failoverReasons = []l2.MoveReason{l2.MovedPeerLost, l2.MovedReleased}

// observeFailover records a takeover that moved an address here from
// another node; other takeovers are not failovers.
func observeFailover(t l2.Takeover) {
	if !t.Moved() {
		return
	}
	a := t.Addr.String()
	metricFailover.WithLabelValues(a, string(t.Reason)).Observe(t.Gap.Seconds())
	metricLastFailover.WithLabelValues(a).Set(float64(t.At.Unix()) + float64(t.At.Nanosecond())/1e9)
	failoverSeries.Lock()
	failoverSeries.addrs[t.Addr] = true
	failoverSeries.Unlock()
}

// syncFailoverSeries makes the failover series those of planned: every
// planned address has a series for each reason (zero where it never
// moved for it), an address no longer planned none.
func syncFailoverSeries(planned []netip.Addr) {
	failoverSeries.Lock()
	defer failoverSeries.Unlock()
	for a := range failoverSeries.addrs {
		if !slices.Contains(planned, a) {
			metricFailover.DeletePartialMatch(prometheus.Labels{"address": a.String()})
			metricLastFailover.DeleteLabelValues(a.String())
			delete(failoverSeries.addrs, a)
		}
	}
	for _, a := range planned {
		for _, r := range failoverReasons {
			metricFailover.WithLabelValues(a.String(), string(r))
		}
		failoverSeries.addrs[a] = true
	}
}
