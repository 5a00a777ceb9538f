package agent

import "testing"

func TestGCPercentFor(t *testing.T) {
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	if got, ok := GCPercentFor(env(nil)); !ok || got != GCPercent {
		t.Errorf("without GOGC: %d, %v; want %d, true", got, ok, GCPercent)
	}
	if _, ok := GCPercentFor(env(map[string]string{"GOGC": "100"})); ok {
		t.Error("with GOGC set, the agent must leave the collector as GOGC says")
	}
}
