// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
)

// accountingMetric is one of kube-proxy's metrics that read a netfilter
// accounting (nfacct) counter of the node, which the iptables rules count
// packets into. They keep kube-proxy's names, without labels, so that its
// dashboards and upstream's e2e read them.
type accountingMetric struct {
	counter string
	desc    *prometheus.Desc
}

var accountingMetrics = []accountingMetric{
	{iptables.CounterLocalhostNodePorts, prometheus.NewDesc("kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
		"Packets to NodePorts on 127.0.0.0/8 that the iptables rules accepted (the first of each connection: the rule is in the nat table), "+
			"read from the node's nfacct counter "+iptables.CounterLocalhostNodePorts+" at scrape time.", nil, nil)},
	{iptables.CounterInvalidDropped, prometheus.NewDesc("kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
		"Packets the iptables rules dropped because conntrack marked them INVALID (kube-proxy's work-around for conntrack problems), "+
			"read from the node's nfacct counter "+iptables.CounterInvalidDropped+" at scrape time.", nil, nil)},
}

// counterReader reads an nfacct counter; *nfacct.Client is the real one.
type counterReader interface {
	Get(name string) (nfacct.Counter, error)
}

// accountingCollector exports the node's nfacct counters as kube-proxy's
// collector does: each scrape reads them from the kernel, and a counter
// that cannot be read (not created yet, or nfacct failing) is left out
// of that scrape and logged.
type accountingCollector struct {
	counters counterReader
	log      logr.Logger
}

var _ prometheus.Collector = (*accountingCollector)(nil)

// Describe implements prometheus.Collector.
func (c *accountingCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range accountingMetrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (c *accountingCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range accountingMetrics {
		cnt, err := c.counters.Get(m.counter)
		if err != nil {
			c.log.Error(err, "Failed to read nfacct counter", "counter", m.counter)
			continue
		}
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(cnt.Packets))
	}
}

// openAccounting returns the nfacct client of the node (cfg.NetNS) in
// iptables mode, or nil where the kernel does not answer: the rules then
// count nothing and the metrics are not exported, as with kube-proxy.
func openAccounting(cfg Config, log logr.Logger) *nfacct.Client {
	if cfg.Mode != ModeIPTables {
		return nil
	}
	acct := nfacct.New(cfg.NetNS)
	if err := acct.Available(); err != nil {
		log.Error(err, "The iptables rules will not count packets into nfacct counters, and the metrics that read them are not exported")
		return nil
	}
	return acct
}

// exportAccounting registers a collector of the counters on reg, and
// returns what unregisters it. One process exports one node's counters:
// where several agents share a process (tests), the first one's.
func exportAccounting(reg prometheus.Registerer, counters counterReader, log logr.Logger) (unregister func()) {
	c := &accountingCollector{counters: counters, log: log}
	if err := reg.Register(c); err != nil {
		if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
			log.V(1).Info("Not exporting this node's nfacct counters: another agent in this process exports its own")
		} else {
			log.Error(err, "Not exporting the node's nfacct counters")
		}
		return func() {}
	}
	return func() { reg.Unregister(c) }
}
