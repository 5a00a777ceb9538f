// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/svcnet-io/svcnet/internal/monitoring"
)

// monitoringPicture is the picture of TestUpMonitoring's run that README
// and docs/operations.md show; the test rewrites it when
// SVCNET_UPDATE_PICTURES=1, and otherwise draws it into its temporary
// folder.
const monitoringPicture = "../../docs/img/monitoring.png"

// rangeSeries is one series of a range query, its samples as seconds
// since from.
type rangeSeries struct {
	labels map[string]string
	xys    plotter.XYs
}

// queryRange runs a range query from from to now, one step a second.
func (p *prometheus) queryRange(expr string, from time.Time) ([]rangeSeries, error) {
	// From the first whole second after from: the one before may still
	// see what the test waited to end.
	first := from.Unix() + 1
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(first, 10)},
		"end": {strconv.FormatInt(time.Now().Unix()+1, 10)}, "step": {"1"}}
	var matrix []struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	if err := p.api("/api/v1/query_range", q, "matrix", &matrix); err != nil {
		return nil, err
	}
	var series []rangeSeries
	for _, r := range matrix {
		s := rangeSeries{labels: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			val, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
			if err != nil || math.IsNaN(val) || math.IsInf(val, 0) {
				continue
			}
			s.xys = append(s.xys, plotter.XY{X: ts - float64(from.Unix()), Y: val})
		}
		series = append(series, s)
	}
	return series, nil
}

// drawMonitoringPicture draws three panels of the run from from: each
// node's network programming latency, the pool filling up, and the
// alerts that fired.
func (p *prometheus) drawMonitoringPicture(t *testing.T, from time.Time) {
	t.Helper()
	latency, err := p.queryRange("histogram_quantile(0.99, sum by (instance, le) (rate(kubeproxy_network_programming_duration_seconds_bucket[20s])))", from)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := p.queryRange(fmt.Sprintf("svcnet_loadbalancer_pool_allocated{pool=%q} / svcnet_loadbalancer_pool_capacity{pool=%q}", upPool, upPool), from)
	if err != nil {
		t.Fatal(err)
	}
	alerts, err := p.queryRange(`max by (alertname) (ALERTS{alertstate="firing"})`, from)
	if err != nil {
		t.Fatal(err)
	}
	poolPlot := linePlot(t, "LoadBalancerIPPool svcnet-up in use", "share of its addresses", pool, "pool")
	threshold, err := plotter.NewLine(plotter.XYs{{X: poolPlot.X.Min, Y: monitoring.DefaultParams().Full}, {X: poolPlot.X.Max, Y: monitoring.DefaultParams().Full}})
	if err != nil {
		t.Fatal(err)
	}
	threshold.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	poolPlot.Add(threshold)
	poolPlot.Legend.Add("SvcnetLoadBalancerPoolNearlyFull", threshold)
	panels := [][]*plot.Plot{{
		linePlot(t, "Network programming latency, p99", "seconds", latency, "instance"),
		poolPlot,
		timeline(t, "Alerts firing", alerts, "alertname"),
	}}
	const width, height = 14 * vg.Inch, 4 * vg.Inch
	img := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))}
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: 6 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	canvases := plot.Align(panels, tiles, draw.New(img))
	for i, pl := range panels[0] {
		pl.Draw(canvases[0][i])
	}
	path := filepath.Join(t.TempDir(), "monitoring.png")
	if os.Getenv("SVCNET_UPDATE_PICTURES") == "1" {
		path = monitoringPicture
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := img.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	t.Logf("the run's picture: %s", path)
}

// linePlot is a panel with a line per series, named by its label key.
func linePlot(t *testing.T, title, unit string, series []rangeSeries, key string) *plot.Plot {
	t.Helper()
	if len(series) == 0 {
		t.Errorf("no data for the panel %q", title)
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "seconds into the test"
	pl.Y.Label.Text = unit
	pl.Y.Min = 0
	slices.SortFunc(series, func(a, b rangeSeries) int { return strings.Compare(a.labels[key], b.labels[key]) })
	for i, s := range series {
		l, err := plotter.NewLine(s.xys)
		if err != nil {
			t.Fatal(err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		pl.Add(l)
		pl.Legend.Add(s.labels[key], l)
	}
	return pl
}

// timeline is a panel with a row per series, marked where it is present
// (a firing alert).
func timeline(t *testing.T, title string, series []rangeSeries, key string) *plot.Plot {
	t.Helper()
	if len(series) == 0 {
		t.Errorf("no data for the panel %q", title)
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = "seconds into the test"
	slices.SortFunc(series, func(a, b rangeSeries) int { return strings.Compare(a.labels[key], b.labels[key]) })
	var ticks []plot.Tick
	for i, s := range series {
		row := make(plotter.XYs, len(s.xys))
		for j, xy := range s.xys {
			row[j] = plotter.XY{X: xy.X, Y: float64(i)}
		}
		sc, err := plotter.NewScatter(row)
		if err != nil {
			t.Fatal(err)
		}
		sc.Color = plotutil.Color(i)
		sc.Radius = vg.Points(2)
		pl.Add(sc)
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: s.labels[key]})
	}
	pl.Y.Tick.Marker = plot.ConstantTicks(ticks)
	pl.Y.Min, pl.Y.Max = -0.5, float64(len(series))-0.5
	return pl
}
