// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package charts embeds svcnet's Helm chart (charts/svcnet), so that
// `svcnet up --install=helm` installs exactly the chart users install.
package charts

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed all:svcnet
var files embed.FS

// WriteSvcnet writes the svcnet chart into dir (replacing what is there)
// and returns the chart's folder.
func WriteSvcnet(dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.CopyFS(dir, files); err != nil {
		return "", fmt.Errorf("writing the svcnet chart to %s: %w", dir, err)
	}
	chart := filepath.Join(dir, "svcnet")
	if _, err := fs.Stat(files, "svcnet/Chart.yaml"); err != nil {
		return "", err
	}
	return chart, nil
}
