// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svcnet-io/svcnet/internal/platform/nfacct"
)

// fakeCounters is a node's nfacct counters.
type fakeCounters struct {
	mu       sync.Mutex
	counters map[string]nfacct.Counter
}

func (f *fakeCounters) Get(name string) (nfacct.Counter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.counters[name]
	if !ok {
		return nfacct.Counter{}, fmt.Errorf("%w: %q", nfacct.ErrNotFound, name)
	}
	return c, nil
}

// scrape gathers reg as a metrics server does: each metric's type, and its
// value by name; a metric with labels fails the test.
func scrape(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != 1 || len(f.GetMetric()[0].GetLabel()) != 0 {
			t.Errorf("%s: %v, want one counter without labels", f.GetName(), f)
			continue
		}
		out[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
	}
	return out
}

// TestAccountingMetricsReadTheCounters checks kube-proxy's two nfacct
// metrics: the packets of each counter as it is at scrape time, no sample
// for a counter that cannot be read, and one node's counters per process.
func TestAccountingMetricsReadTheCounters(t *testing.T) {
	node := &fakeCounters{counters: map[string]nfacct.Counter{
		"localhost_nps_accepted_pkts":   {Name: "localhost_nps_accepted_pkts", Packets: 10, Bytes: 600},
		"ct_state_invalid_dropped_pkts": {Name: "ct_state_invalid_dropped_pkts", Packets: 3, Bytes: 180},
	}}
	reg := prometheus.NewPedanticRegistry()
	unregister := exportAccounting(reg, node, logr.Discard())
	want := map[string]float64{
		"kubeproxy_iptables_localhost_nodeports_accepted_packets_total": 10,
		"kubeproxy_iptables_ct_state_invalid_dropped_packets_total":     3,
	}
	if diff := cmp.Diff(want, scrape(t, reg)); diff != "" {
		t.Errorf("first scrape (-want +got):\n%s", diff)
	}

	node.mu.Lock()
	node.counters["localhost_nps_accepted_pkts"] = nfacct.Counter{Name: "localhost_nps_accepted_pkts", Packets: 20}
	delete(node.counters, "ct_state_invalid_dropped_pkts")
	node.mu.Unlock()
	want = map[string]float64{"kubeproxy_iptables_localhost_nodeports_accepted_packets_total": 20}
	if diff := cmp.Diff(want, scrape(t, reg)); diff != "" {
		t.Errorf("scrape with one counter gone (-want +got):\n%s", diff)
	}

	other := &fakeCounters{counters: map[string]nfacct.Counter{"localhost_nps_accepted_pkts": {Packets: 99}}}
	exportAccounting(reg, other, logr.Discard())()
	if diff := cmp.Diff(want, scrape(t, reg)); diff != "" {
		t.Errorf("after a second agent's export (-want +got):\n%s", diff)
	}
	unregister()
	if got := scrape(t, reg); len(got) != 0 {
		t.Errorf("after unregistering: %v, want nothing", got)
	}
}
