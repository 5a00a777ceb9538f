// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestSupervisedBacksOff checks a node agent's supervision as a kubelet
// restarts a crashing container: restarted after each exit, the wait
// doubling up to its cap, never given up, each restart reported with how
// the process ended.
func TestSupervisedBacksOff(t *testing.T) {
	policy := restartPolicy{delay: 10 * time.Millisecond, maxDelay: 40 * time.Millisecond, resetAfter: time.Hour}
	sv, _, err := startSupervised("crasher", "/bin/sh", []string{"-c", "exit 3"}, filepath.Join(t.TempDir(), "crasher.log"), policy)
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan restartEvent, 16)
	sv.onRestart = func(ev restartEvent) { events <- ev }
	failed := make(chan *process, 1)
	go sv.run(io.Discard, failed)
	defer sv.stop(time.Second)

	var got []restartEvent
	for len(got) < 5 {
		select {
		case ev := <-events:
			got = append(got, ev)
		case p := <-failed:
			t.Fatalf("supervision gave up on %s after %d restarts; a node agent is restarted forever", p.name, len(got))
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d restarts within 10s: %+v", len(got), got)
		}
	}
	want := []restartEvent{
		{name: "crasher", status: "exit status 3", restarts: 1, delay: 10 * time.Millisecond},
		{name: "crasher", status: "exit status 3", restarts: 2, delay: 20 * time.Millisecond},
		{name: "crasher", status: "exit status 3", restarts: 3, delay: 40 * time.Millisecond},
		{name: "crasher", status: "exit status 3", restarts: 4, delay: 40 * time.Millisecond},
		{name: "crasher", status: "exit status 3", restarts: 5, delay: 40 * time.Millisecond},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(restartEvent{})); diff != "" {
		t.Errorf("restarts (-want +got):\n%s", diff)
	}
}

// TestSupervisedGivesUp checks the control plane's supervision: past its
// limit of restarts within the window, the child is reported failed and
// not started again.
func TestSupervisedGivesUp(t *testing.T) {
	policy := restartPolicy{limit: 2, window: time.Minute, delay: time.Millisecond, maxDelay: time.Millisecond}
	sv, _, err := startSupervised("etcd", "/bin/sh", []string{"-c", "exit 1"}, filepath.Join(t.TempDir(), "etcd.log"), policy)
	if err != nil {
		t.Fatal(err)
	}
	restarts := 0
	sv.onRestart = func(restartEvent) { restarts++ }
	failed := make(chan *process, 1)
	go sv.run(io.Discard, failed)
	defer sv.stop(time.Second)
	select {
	case p := <-failed:
		if p.name != "etcd" || restarts != 2 {
			t.Errorf("reported %s after %d restarts, want etcd after 2", p.name, restarts)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not reported failed after %d restarts", restarts)
	}
}

// TestSupervisedStop checks that stop ends the running process and that
// no restart follows.
func TestSupervisedStop(t *testing.T) {
	sv, p, err := startSupervised("agent", "/bin/sh", []string{"-c", "sleep 60"}, filepath.Join(t.TempDir(), "agent.log"), nodeProxyRestarts)
	if err != nil {
		t.Fatal(err)
	}
	sv.onRestart = func(ev restartEvent) { t.Errorf("restarted after stop: %s", ev) }
	done := make(chan struct{})
	go func() { sv.run(io.Discard, make(chan *process, 1)); close(done) }()
	sv.stop(5 * time.Second)
	if !p.Exited() {
		t.Fatal("the process still runs after stop")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("supervision still runs after stop")
	}
}
