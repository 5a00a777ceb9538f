// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/svcnet-io/svcnet/test/testenv"
)

// promtool is bin/prometheus/promtool (make prometheus).
func promtool(t *testing.T) string {
	t.Helper()
	dir, err := testenv.ModuleBinDir("prometheus", "promtool")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "promtool")
}

// TestRulesPromtool checks the shipped rule file with promtool and runs
// promtool's unit tests of every alert (testdata/rules_test.yaml).
func TestRulesPromtool(t *testing.T) {
	bin := promtool(t)
	rules := filepath.Join(chartDir, filepath.FromSlash(RulesFile))
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(bin, args...)
		if args[0] == "test" {
			cmd.Dir = "testdata"
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// promtoolTests is the part of a promtool test file this package reads.
type promtoolTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertHasCases keeps testdata/rules_test.yaml whole: each
// alert must have a case where it fires and one where it must not.
func TestEveryAlertHasCases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests promtoolTests
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	rules, err := Rules(DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if !fires[r.Alert] {
				t.Errorf("%s has no promtool case where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s has no promtool case where it must not fire", r.Alert)
			}
		}
	}
	for name := range fires {
		if !slices.Contains(alerts, name) {
			t.Errorf("testdata/rules_test.yaml tests %s, which the rules do not have", name)
		}
	}
}

func TestRulesRefuseABudgetThatIsNoBucket(t *testing.T) {
	p := DefaultParams()
	p.FailoverBudget = 700 * time.Millisecond
	if _, err := Rules(p); err == nil {
		t.Fatal("a failover budget of 700ms (no bucket bound) was accepted")
	}
}
