// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"encoding/json"
	"path"
)

// ChartDir is where the chart carries the files, relative to the
// repository's root.
const ChartDir = "charts/svcnet/files/monitoring"

// RulesFile is the rule file's path in ChartDir.
const RulesFile = "rules/svcnet.rules.yaml"

// generatedHeader heads the rule file: it is written from this package.
const generatedHeader = "# Generated from internal/monitoring by `make monitoring`; do not edit.\n"

// Files renders the shipped rules (with DefaultParams) and dashboards,
// keyed by their path in ChartDir.
func Files() (map[string][]byte, error) {
	rules, err := Rules(DefaultParams())
	if err != nil {
		return nil, err
	}
	y, err := rules.YAML()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{RulesFile: append([]byte(generatedHeader), y...)}
	dashboards, err := Dashboards()
	if err != nil {
		return nil, err
	}
	for _, d := range dashboards {
		j, err := json.MarshalIndent(d.Dashboard, "", "  ")
		if err != nil {
			return nil, err
		}
		out[path.Join("dashboards", d.File)] = append(j, '\n')
	}
	return out, nil
}
