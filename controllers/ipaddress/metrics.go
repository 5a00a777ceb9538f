// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package ipaddress

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/svcnet-io/svcnet/allocator/ipam"
)

var (
	descAllocated = prometheus.NewDesc("svcnet_clusterip_cidr_allocated",
		"ClusterIPs allocated (IPAddress objects) in each ServiceCIDR; an address in nested ServiceCIDRs counts in each.", []string{"servicecidr"}, nil)
	descAvailable = prometheus.NewDesc("svcnet_clusterip_cidr_available",
		"ClusterIPs still free in each ServiceCIDR.", []string{"servicecidr"}, nil)
	descExhausted = prometheus.NewDesc("svcnet_clusterip_cidr_exhausted",
		"1 when the ServiceCIDR has no free address left, else 0.", []string{"servicecidr"}, nil)

	// kube-apiserver's gauges (pkg/registry/core/service/ipallocator,
	// v1.37): one series per ServiceCIDR prefix, labelled with it, as
	// kube-apiserver keeps one allocator per prefix. A prefix that several
	// ServiceCIDRs name is one series. The counters and the histogram are
	// the admission webhook's (package admission).
	descUpstreamAllocated = prometheus.NewDesc("kube_apiserver_clusterip_allocator_allocated_ips",
		"[ALPHA] ClusterIPs allocated to Services, by ServiceCIDR prefix (cidr)", []string{"cidr"}, nil)
	descUpstreamAvailable = prometheus.NewDesc("kube_apiserver_clusterip_allocator_available_ips",
		"[ALPHA] ClusterIPs still free for Services, by ServiceCIDR prefix (cidr)", []string{"cidr"}, nil)
)

// usageCollector reads the audit's view at scrape time, so series of
// deleted ServiceCIDRs disappear with them.
type usageCollector struct{ usage *ipam.Allocator }

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAllocated
	ch <- descAvailable
	ch <- descExhausted
	ch <- descUpstreamAllocated
	ch <- descUpstreamAvailable
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	for name, st := range c.usage.Stats() {
		free := float64(st.Size - st.Allocated)
		ch <- prometheus.MustNewConstMetric(descAllocated, prometheus.GaugeValue, float64(st.Allocated), name)
		ch <- prometheus.MustNewConstMetric(descAvailable, prometheus.GaugeValue, free, name)
		exhausted := 0.0
		if st.Size > 0 && free == 0 {
			exhausted = 1
		}
		ch <- prometheus.MustNewConstMetric(descExhausted, prometheus.GaugeValue, exhausted, name)
	}
	for prefix, st := range c.usage.PrefixStats() {
		cidr := prefix.String()
		ch <- prometheus.MustNewConstMetric(descUpstreamAllocated, prometheus.GaugeValue, float64(st.Allocated), cidr)
		ch <- prometheus.MustNewConstMetric(descUpstreamAvailable, prometheus.GaugeValue, float64(st.Size-st.Allocated), cidr)
	}
}

var (
	registerOnce sync.Once
	current      = &usageCollector{}
	currentMu    sync.Mutex
)

// registerUsage exports usage; a restarted controller (tests) takes over
// the registration.
func registerUsage(u *ipam.Allocator) {
	currentMu.Lock()
	current.usage = u
	currentMu.Unlock()
	registerOnce.Do(func() { metrics.Registry.MustRegister(lockedCollector{}) })
}

type lockedCollector struct{}

func (lockedCollector) Describe(ch chan<- *prometheus.Desc) { current.Describe(ch) }
func (lockedCollector) Collect(ch chan<- prometheus.Metric) {
	currentMu.Lock()
	c := *current
	currentMu.Unlock()
	if c.usage != nil {
		c.Collect(ch)
	}
}
