// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package announce

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(metricAddresses, metricOwned, metricTakeovers, metricPeers, metricSessionUp, metricInterfaceMissing)
	})
}
