// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

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
	metricSessionUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcnet_announce_bgp_session_up",
		Help: "1 when the BGP session with the peer is established.",
	}, []string{"peer"})
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
			metricPeers, metricSessionUp, metricInterfaceMissing)
	})
}

// failedOver are the addresses with failover series, so that those of an
// address that is gone (its Service deleted) go too.
var failedOver = struct {
	sync.Mutex
	addrs map[netip.Addr]bool
}{addrs: map[netip.Addr]bool{}}

// observeFailover records a takeover that moved an address here from
// another node; other takeovers are not failovers.
func observeFailover(t l2.Takeover) {
	if !t.Moved() {
		return
	}
	a := t.Addr.String()
	metricFailover.WithLabelValues(a, string(t.Reason)).Observe(t.Gap.Seconds())
	metricLastFailover.WithLabelValues(a).Set(float64(t.At.Unix()) + float64(t.At.Nanosecond())/1e9)
	failedOver.Lock()
	failedOver.addrs[t.Addr] = true
	failedOver.Unlock()
}

// forgetFailovers deletes the failover series of the addresses keep
// rejects.
func forgetFailovers(keep func(netip.Addr) bool) {
	failedOver.Lock()
	defer failedOver.Unlock()
	for a := range failedOver.addrs {
		if !keep(a) {
			metricFailover.DeletePartialMatch(prometheus.Labels{"address": a.String()})
			metricLastFailover.DeleteLabelValues(a.String())
			delete(failedOver.addrs, a)
		}
	}
}
