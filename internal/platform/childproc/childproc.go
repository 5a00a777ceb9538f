// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package childproc starts child processes that die with their parent.
//
// Linux sends a child its parent-death signal (Pdeathsig) when the thread
// that forked it ends, not when the process does. Go ends the threads that
// goroutines lock (network namespace work, the node simulator's
// containers) when those goroutines return, so a child forked from one of
// them would be killed while its parent still runs. Start forks every
// child from one goroutine locked to its thread for the process's life.
package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

var (
	once sync.Once
	reqs chan request
)

type request struct {
	cmd  *exec.Cmd
	done chan error
}

// Start starts cmd in a process group of its own, with SIGKILL as its
// parent-death signal, from the one thread that lasts as long as this
// process.
func Start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	once.Do(func() {
		reqs = make(chan request)
		go func() {
			runtime.LockOSThread()
			for r := range reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := request{cmd: cmd, done: make(chan error, 1)}
	reqs <- r
	return <-r.done
}
