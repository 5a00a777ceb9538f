// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Figures: charts drawn from the records alone, as SVG (text, so that a
// rerun's diff shows and `make bench-report` writes the same bytes), kept
// in figuresDir beside BENCHMARKS.md, which embeds them.
const figuresDir = "docs/img"

// figure is one chart: its file name in figuresDir and its SVG.
type figure struct {
	name string
	svg  []byte
}

// writeFigures draws every recorded section's figures into figuresDir.
func writeFigures(root string) error {
	for _, s := range recordedSections {
		if s.figures == nil {
			continue
		}
		figs, err := s.figures(root)
		if err != nil {
			return fmt.Errorf("section (%s): %w", s.letter, err)
		}
		for _, f := range figs {
			if err := os.WriteFile(filepath.Join(root, figuresDir, f.name), f.svg, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// failoverFigureName is the chart of a failover table.
func (t annTable) failoverFigureName() string {
	return "failover-" + t.letter + ".svg"
}

// charted are the rows a failover chart shows: those whose traffic
// moved, in the table's order.
func charted(rows []annResult) []annResult {
	var out []annResult
	for _, r := range rows {
		if r.NotMeasured == "" && slices.ContainsFunc(r.Took, func(d time.Duration) bool { return d > 0 }) {
			out = append(out, r)
		}
	}
	return out
}

// figures draws the table's moved times, a box a row (median, quartiles,
// whiskers to the furthest try within 1.5 interquartile ranges, the
// others as points), on a log scale: L2's half second and MetalLB's six
// seconds on one axis.
func (t annTable) figures(rec *record[annData]) ([]figure, error) {
	rows := charted(rec.Data.Rows)
	if len(rows) == 0 {
		return nil, nil
	}
	p, err := t.failoverPlot(rows)
	if err != nil {
		return nil, err
	}
	c := vgsvg.New(9*vg.Inch, vg.Length(len(rows))*0.32*vg.Inch+1.1*vg.Inch)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return []figure{{name: t.failoverFigureName(), svg: buf.Bytes()}}, nil
}

// failoverPlot is the chart of rows.
func (t annTable) failoverPlot(rows []annResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("(%s) failover: the kill to the first connection through another node", t.letter)
	p.X.Label.Text = "ms (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	names := make([]string, len(rows))
	for i, r := range rows {
		// Reversed, so the table's first row is the chart's top one.
		at := len(rows) - 1 - i
		names[at] = r.Name
		vs := make(plotter.Values, len(r.Took))
		for j, d := range r.Took {
			vs[j] = max(float64(d.Microseconds())/1000, 1)
		}
		b, err := plotter.NewBoxPlot(vg.Points(10), float64(at), vs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Name, err)
		}
		b.Horizontal = true
		p.Add(b)
	}
	p.NominalY(names...)
	// Whole decades, so that every box lies inside the axis and the
	// ticks name them.
	p.X.Min = math.Pow(10, math.Floor(math.Log10(p.X.Min)))
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(p.X.Max)))
	return p, nil
}
