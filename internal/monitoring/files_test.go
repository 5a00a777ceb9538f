// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the chart's monitoring files")

// chartDir is ChartDir from this package's folder.
var chartDir = filepath.Join("..", "..", filepath.FromSlash(ChartDir))

// TestChartFiles keeps the chart's files what this package renders
// (`make monitoring` runs it with -update).
func TestChartFiles(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.RemoveAll(chartDir); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			p := filepath.Join(chartDir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var onDisk []string
	err = filepath.WalkDir(chartDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(chartDir, p)
		onDisk = append(onDisk, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for name, data := range files {
		want = append(want, name)
		got, err := os.ReadFile(filepath.Join(chartDir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("%s: %v; run make monitoring and commit", name, err)
			continue
		}
		if diff := cmp.Diff(string(data), string(got)); diff != "" {
			t.Errorf("%s is out of date (-rendered +committed); run make monitoring and commit:\n%s", name, diff)
		}
	}
	slices.Sort(want)
	slices.Sort(onDisk)
	if diff := cmp.Diff(want, onDisk); diff != "" {
		t.Errorf("files in %s (-rendered +on disk); run make monitoring and commit:\n%s", ChartDir, diff)
	}
}
