// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command pause is the Pod sandbox's placeholder process of the pause
// image the simulated nodes run (registry.k8s.io/pause): it does nothing
// until SIGINT or SIGTERM asks it to stop, then exits 0. As PID 1 of a
// PID namespace it also reaps the orphans that namespace hands it, so
// they never linger as zombies.
//
// It is built by hack/node-images/build.sh, statically (CGO_ENABLED=0),
// into bin/images/pause/rootfs/pause.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: not PID 1, so orphans are not reaped here")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down on %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every child that has ended; one SIGCHLD may stand for
// several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
