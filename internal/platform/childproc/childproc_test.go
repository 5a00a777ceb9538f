// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package childproc

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestChildOutlivesTheThreadThatAsked starts a child from a goroutine that
// locks its thread and returns, which ends the thread: the child must keep
// running, as it would not had it been forked from that thread.
func TestChildOutlivesTheThreadThatAsked(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	// The main thread is never ended, so the asking goroutine must run on
	// another one; a goroutine that lands on it tries again.
	var err error
	for asked := false; !asked; {
		started := make(chan error, 1)
		onMain := make(chan bool, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if syscall.Gettid() == syscall.Getpid() {
				onMain <- true
				return
			}
			onMain <- false
			started <- Start(cmd)
		}()
		if !<-onMain {
			asked, err = true, <-started
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL || !cmd.SysProcAttr.Setpgid {
		t.Fatalf("SysProcAttr = %+v, want its own group and SIGKILL on parent death", cmd.SysProcAttr)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the child died when the asking thread ended: %v", err)
	case <-time.After(time.Second):
	}
	_ = cmd.Process.Kill()
	if err := <-exited; err == nil {
		t.Fatal("the child exited cleanly, want it killed")
	}
}
