// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package trafficload

import (
	"errors"
	"testing"
	"time"
)

// Phase splits the counts, the failures and the longest gap at each call.
func TestPhase(t *testing.T) {
	l := New()
	last := time.Now().Add(-30 * time.Millisecond)
	l.record(nil, &l.r.NewOK, &l.r.NewFailed, &last)
	l.record(errors.New("refused"), &l.r.NewOK, &l.r.NewFailed, &last)
	first := l.Phase()
	if first.NewOK != 1 || len(first.NewFailed) != 1 || first.LongestGap < 30*time.Millisecond {
		t.Errorf("first phase %+v", first)
	}
	l.record(nil, &l.r.NewOK, &l.r.NewFailed, &last)
	second := l.Phase()
	if second.NewOK != 1 || len(second.NewFailed) != 0 || second.LongestGap >= 30*time.Millisecond {
		t.Errorf("second phase %+v", second)
	}
	if all := l.Stop(); all.NewOK != 2 || len(all.NewFailed) != 1 || all.LongestGap < 30*time.Millisecond {
		t.Errorf("whole load %+v", all)
	}
}
