// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package metricstest reads metrics back from a Prometheus registry for
// the controllers' tests: the shape of a series (name, type, help, label
// names, buckets), to hold it to kube-controller-manager's, and the value
// of one series after real reconciles. Only tests import it.
package metricstest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Shape is what a dashboard or an alert relies on of a metric family.
type Shape struct {
	Name, Type, Help string
	// Labels are the label names of the family's first series, sorted.
	Labels []string
	// Buckets are a histogram's upper bounds (without +Inf).
	Buckets []float64
}

// Shapes gathers g and returns the shape of every family whose name is in
// names (all of them when names is empty). A family without series (a
// vector nobody has touched) is not gathered, so callers create the series
// they expect first.
func Shapes(g prometheus.Gatherer, names ...string) (map[string]Shape, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	out := map[string]Shape{}
	for _, mf := range mfs {
		if len(names) > 0 && !slices.Contains(names, mf.GetName()) {
			continue
		}
		s := Shape{Name: mf.GetName(), Type: mf.GetType().String(), Help: mf.GetHelp()}
		if ms := mf.GetMetric(); len(ms) > 0 {
			for _, l := range ms[0].GetLabel() {
				s.Labels = append(s.Labels, l.GetName())
			}
			slices.Sort(s.Labels)
			for _, b := range ms[0].GetHistogram().GetBucket() {
				s.Buckets = append(s.Buckets, b.GetUpperBound())
			}
		}
		out[s.Name] = s
	}
	return out, nil
}

// Value returns the value of the series of family name whose labels are
// exactly labels: a counter's or gauge's value, a histogram's sample count.
// A series that does not exist is 0, as a query's increase() would see it.
func Value(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	h, err := Histogram(g, name, labels)
	if err != nil {
		return 0, err
	}
	return h.Count + h.value, nil
}

// HistogramSeries is a histogram series' count and sum.
type HistogramSeries struct {
	Count, Sum float64
	value      float64 // a counter's or gauge's value, when not a histogram
}

// Histogram returns the count and sum of a histogram series (see Value).
func Histogram(g prometheus.Gatherer, name string, labels map[string]string) (HistogramSeries, error) {
	mfs, err := g.Gather()
	if err != nil {
		return HistogramSeries{}, fmt.Errorf("gathering metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsAre(m, labels) {
				continue
			}
			switch {
			case m.GetHistogram() != nil:
				return HistogramSeries{Count: float64(m.GetHistogram().GetSampleCount()), Sum: m.GetHistogram().GetSampleSum()}, nil
			case m.GetCounter() != nil:
				return HistogramSeries{value: m.GetCounter().GetValue()}, nil
			case m.GetGauge() != nil:
				return HistogramSeries{value: m.GetGauge().GetValue()}, nil
			}
		}
	}
	return HistogramSeries{}, nil
}

func labelsAre(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// ExpectShapes gathers g and checks, in a subtest per family, that every
// family of want (keyed by name) has that shape.
func ExpectShapes(t *testing.T, g prometheus.Gatherer, want map[string]Shape) {
	t.Helper()
	got, err := Shapes(g)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			w.Name = name
			if diff := cmp.Diff(w, got[name]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", name, diff)
			}
		})
	}
}
