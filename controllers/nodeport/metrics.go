// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeport

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/portrange"
)

var (
	descAllocated = prometheus.NewDesc("svcnet_nodeport_allocated",
		"nodePorts held by Services (a port shared by TCP and UDP of one Service counts once).", []string{"range"}, nil)
	descAvailable = prometheus.NewDesc("svcnet_nodeport_available",
		"nodePorts still free in the range.", []string{"range"}, nil)

	// kube-apiserver's gauges (pkg/registry/core/service/portallocator,
	// v1.37), unlabelled as there: the same numbers as svcnet's above. The
	// counters are the admission webhook's (package admission).
	descUpstreamAllocated = prometheus.NewDesc("kube_apiserver_nodeport_allocator_allocated_ports",
		"[ALPHA] NodePorts allocated to Services", nil, nil)
	descUpstreamAvailable = prometheus.NewDesc("kube_apiserver_nodeport_allocator_available_ports",
		"[ALPHA] NodePorts still free for Services", nil, nil)
)

var (
	usageMu sync.Mutex
	usage   *portrange.Allocator
	once    sync.Once
)

// registerUsage exports usage; a restarted controller (tests) takes over.
func registerUsage(u *portrange.Allocator) {
	usageMu.Lock()
	usage = u
	usageMu.Unlock()
	once.Do(func() { metrics.Registry.MustRegister(collector{}) })
}

type collector struct{}

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAllocated
	ch <- descAvailable
	ch <- descUpstreamAllocated
	ch <- descUpstreamAvailable
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	usageMu.Lock()
	u := usage
	usageMu.Unlock()
	if u == nil {
		return
	}
	st := u.Stats()
	name := u.Range().String()
	allocated, available := float64(st.Allocated), float64(st.Size-st.Allocated)
	ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, allocated, name)
	ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, available, name)
	ch <- prometheus.MustNewConstMetric(descUpstreamAllocated, prometheus.GaugeValue, allocated)
	ch <- prometheus.MustNewConstMetric(descUpstreamAvailable, prometheus.GaugeValue, available)
}
