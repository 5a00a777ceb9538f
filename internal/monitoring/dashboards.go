// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Dashboard is one of svcnet's Grafana dashboards: the file it is
// shipped as, and the dashboard.
type Dashboard struct {
	File      string
	Dashboard dashboard.Dashboard
}

// The variables every dashboard has: the Prometheus data source, and on
// the node dashboards the agents shown ($instance, all by default).
const (
	datasourceVar = "datasource"
	instanceVar   = "instance"
)

var datasourceRef = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + datasourceVar + "}")}

// Dashboards are svcnet's dashboards, built with grafana-foundation-sdk.
func Dashboards() ([]Dashboard, error) {
	builders := []struct {
		file string
		b    *dashboard.DashboardBuilder
	}{
		{"svcnet-allocation.json", allocationDashboard()},
		{"svcnet-endpointslices.json", endpointSlicesDashboard()},
		{"svcnet-node-rules.json", nodeRulesDashboard()},
		{"svcnet-announcements.json", announcementsDashboard()},
	}
	out := make([]Dashboard, 0, len(builders))
	for _, d := range builders {
		built, err := d.b.Build()
		if err != nil {
			return nil, err
		}
		numberPanels(&built)
		out = append(out, Dashboard{File: d.file, Dashboard: built})
	}
	return out, nil
}

// numberPanels gives every panel and row its own id, in order, as
// Grafana keeps them (links and the panel editor refer to panels by id).
func numberPanels(d *dashboard.Dashboard) {
	for i := range d.Panels {
		id := uint32(i + 1)
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			p.Panel.Id = &id
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
}

// newDashboard starts a dashboard with svcnet's common settings.
func newDashboard(uid, title, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"svcnet"}).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneUtc).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder(datasourceVar).Label("Data source").Type("prometheus"))
}

// withInstances adds the $instance variable: the agents (nodes) whose
// series a node dashboard shows.
func withInstances(b *dashboard.DashboardBuilder, metric string) *dashboard.DashboardBuilder {
	return b.WithVariable(dashboard.NewQueryVariableBuilder(instanceVar).
		Label("Node").
		Datasource(datasourceRef).
		Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(" + metric + ", instance)")}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".+"))
}

// query is a Prometheus target of a panel.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasourceRef).Expr(expr).LegendFormat(legend)
}

// graph is a time series panel.
func graph(title, description, unit string, span uint32, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).Span(span).Height(8).Datasource(datasourceRef)
	for _, t := range targets {
		p = p.WithTarget(t)
	}
	return p
}

// instantTable is a table panel of one instant query, one row a series.
func instantTable(title, description string, span uint32, t *prometheus.DataqueryBuilder) *table.PanelBuilder {
	return table.NewPanelBuilder().Title(title).Description(description).Span(span).Height(8).Datasource(datasourceRef).
		WithTarget(t.Instant().Format(prometheus.PromQueryFormatTable))
}

const rate = "[$__rate_interval]"

func allocationDashboard() *dashboard.DashboardBuilder {
	return newDashboard("svcnet-allocation", "svcnet / Allocation",
		"ClusterIPs, nodePorts and LoadBalancer addresses: how full each range and pool is, and what svcnet hands out at admission.").
		WithRow(dashboard.NewRowBuilder("Ranges and pools")).
		WithPanel(graph("ServiceCIDR usage", "Share of each ServiceCIDR's ClusterIPs allocated (IPAddress objects).", "percentunit", 8,
			query("svcnet_clusterip_cidr_allocated / (svcnet_clusterip_cidr_allocated + svcnet_clusterip_cidr_available)", "{{servicecidr}}")).Min(0).Max(1)).
		WithPanel(graph("nodePort range usage", "Share of the nodePort range held by Services.", "percentunit", 8,
			query("svcnet_nodeport_allocated / (svcnet_nodeport_allocated + svcnet_nodeport_available)", "{{range}}")).Min(0).Max(1)).
		WithPanel(graph("LoadBalancerIPPool usage", "Share of each pool's addresses held by Services.", "percentunit", 8,
			query("svcnet_loadbalancer_pool_allocated / svcnet_loadbalancer_pool_capacity", "{{pool}}")).Min(0).Max(1)).
		WithPanel(graph("LoadBalancerIPPool free addresses", "Addresses each pool can still give.", "short", 12,
			query("svcnet_loadbalancer_pool_capacity - svcnet_loadbalancer_pool_allocated", "{{pool}}")).Min(0)).
		WithPanel(graph("Pool exhausted", "Allocations that found no free address, for every pool the Service could use: such a Service stays pending.", "short", 12,
			query("sum by (pool) (increase(svcnet_loadbalancer_pool_exhausted_total"+rate+"))", "{{pool}}")).Min(0)).
		WithRow(dashboard.NewRowBuilder("Admission")).
		WithPanel(graph("Values handed out", "ClusterIPs and nodePorts svcnet's webhook filled (dynamic: chosen by svcnet; static: asked for).", "ops", 12,
			query("sum by (kind, scope) (rate(svcnet_admission_allocations_total"+rate+"))", "{{kind}} {{scope}}"))).
		WithPanel(graph("Webhook latency", "99th and 50th percentile of the Service webhook's answer, which every Service create and update waits for.", "s", 12,
			query("histogram_quantile(0.99, sum by (le) (rate(svcnet_admission_duration_seconds_bucket"+rate+")))", "p99"),
			query("histogram_quantile(0.5, sum by (le) (rate(svcnet_admission_duration_seconds_bucket"+rate+")))", "p50")))
}

func endpointSlicesDashboard() *dashboard.DashboardBuilder {
	return newDashboard("svcnet-endpointslices", "svcnet / EndpointSlices",
		"The EndpointSlice and mirroring controllers: their writes, their syncs, and how long a Pod or Service change takes to reach a slice.").
		WithRow(dashboard.NewRowBuilder("EndpointSlice controller")).
		WithPanel(graph("Slice writes", "EndpointSlices created, updated and deleted per second.", "ops", 8,
			query("sum by (operation) (rate(endpoint_slice_controller_changes"+rate+"))", "{{operation}}"))).
		WithPanel(graph("Syncs", "Service syncs per second by result.", "ops", 8,
			query("sum by (result) (rate(endpoint_slice_controller_syncs"+rate+"))", "{{result}}"))).
		WithPanel(graph("Change to slice write", "99th and 50th percentile of the time from seeing a Pod or Service change to the slice write that reflects it.", "s", 8,
			query("histogram_quantile(0.99, sum by (le) (rate(svcnet_endpointslice_change_to_write_seconds_bucket"+rate+")))", "p99"),
			query("histogram_quantile(0.5, sum by (le) (rate(svcnet_endpointslice_change_to_write_seconds_bucket"+rate+")))", "p50"))).
		WithPanel(graph("Slices", "EndpointSlices the controller keeps, and the fewest that would hold the endpoints.", "short", 12,
			query("sum(endpoint_slice_controller_num_endpoint_slices)", "slices"),
			query("sum(endpoint_slice_controller_desired_endpoint_slices)", "desired"))).
		WithPanel(graph("Endpoints", "Endpoints the slices should hold.", "short", 12,
			query("sum(endpoint_slice_controller_endpoints_desired)", "endpoints"))).
		WithRow(dashboard.NewRowBuilder("Mirroring controller")).
		WithPanel(graph("Mirrored slice writes", "EndpointSlices written for Endpoints of Services without a selector.", "ops", 12,
			query("sum by (operation) (rate(endpoint_slice_mirroring_controller_changes"+rate+"))", "{{operation}}"))).
		WithPanel(graph("Mirrored endpoints", "Endpoints mirrored into slices.", "short", 12,
			query("sum(endpoint_slice_mirroring_controller_endpoints_desired)", "endpoints")))
}

func nodeRulesDashboard() *dashboard.DashboardBuilder {
	sel := `{instance=~"$` + instanceVar + `"}`
	return withInstances(newDashboard("svcnet-node-rules", "svcnet / Node rules",
		"Each node's Service rules: how long a change takes to reach them (the network programming latency SLI), how long a sync takes, and whether any change waits."),
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds").
		WithRow(dashboard.NewRowBuilder("Latency")).
		WithPanel(graph("Network programming latency, 99th percentile", "From a change of a Service or its endpoints (the slice's last-change-trigger-time) to the node's rules reflecting it: SIG Scalability's SLI.", "s", 12,
			query("histogram_quantile(0.99, sum by (instance, le) (rate(kubeproxy_network_programming_duration_seconds_bucket"+sel+rate+")))", "{{instance}}"))).
		WithPanel(graph("Sync duration, 99th percentile", "One sync of the node's rules, full or partial.", "s", 12,
			query("histogram_quantile(0.99, sum by (instance, le) (rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket"+sel+rate+")))", "{{instance}}"))).
		WithRow(dashboard.NewRowBuilder("Freshness")).
		WithPanel(graph("Since the last sync", "Seconds since each node's last successful sync, by IP family. It grows on a quiet cluster; a change waiting (next panel) while it grows means stale rules.", "s", 8,
			query("time() - kubeproxy_sync_proxy_rules_last_timestamp_seconds"+sel, "{{instance}} {{ip_family}}"))).
		WithPanel(graph("Changes waiting", "Service and endpoint changes seen and not yet in the rules.", "short", 8,
			query("sum by (instance) (kubeproxy_sync_proxy_rules_service_changes_pending"+sel+")", "{{instance}} services"),
			query("sum by (instance) (kubeproxy_sync_proxy_rules_endpoint_changes_pending"+sel+")", "{{instance}} endpoints"))).
		WithPanel(graph("Syncs", "Syncs per second on each node.", "ops", 8,
			query("sum by (instance) (rate(kubeproxy_sync_proxy_rules_duration_seconds_count"+sel+rate+"))", "{{instance}}")))
}

func announcementsDashboard() *dashboard.DashboardBuilder {
	return withInstances(newDashboard("svcnet-announcements", "svcnet / LoadBalancer announcements",
		"Which node announces each LoadBalancer address, and how long an address went unanswered when it moved."),
		"svcnet_announce_addresses").
		WithRow(dashboard.NewRowBuilder("Owners")).
		WithPanel(instantTable("Owner of each address", "The node that answers for each address now (L2: one node; BGP: every node that advertises it).", 12,
			query(`max by (address, instance, mode) (svcnet_announce_owned{instance=~"$`+instanceVar+`"} == 1)`, ""))).
		WithPanel(instantTable("Services no node announces", "LoadBalancer Services whose svcnet.io/LoadBalancerAnnounced condition is False (0) or True (1).", 12,
			query("svcnet_loadbalancer_announced", ""))).
		WithRow(dashboard.NewRowBuilder("Failover")).
		WithPanel(graph("Failover time per address", "How long each address may have gone unanswered when it moved (mean of the moves over the dashboard's range), by why its node stopped.", "s", 12,
			query("sum by (address, reason) (increase(svcnet_announce_failover_seconds_sum[$__range])) / sum by (address, reason) (increase(svcnet_announce_failover_seconds_count[$__range]))", "{{address}} {{reason}}"))).
		WithPanel(graph("Moves", "Addresses each node took over from another.", "short", 12,
			query("sum by (instance, address, reason) (increase(svcnet_announce_failover_seconds_count[$__range]))", "{{address}} to {{instance}} ({{reason}})"))).
		WithPanel(graph("L2 peers", "Live agents each node hears on each interface it announces on.", "short", 12,
			query(`svcnet_announce_peers{instance=~"$`+instanceVar+`"}`, "{{instance}} {{interface}}"))).
		WithPanel(graph("Addresses announced", "Addresses each node announces, by mode and interface.", "short", 12,
			query(`sum by (instance, mode) (svcnet_announce_addresses{instance=~"$`+instanceVar+`"})`, "{{instance}} {{mode}}")))
}
