// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svcnet-io/svcnet/internal/platform/childproc"
	"github.com/svcnet-io/svcnet/test/harness/proctree"
)

// proc is a process under measurement.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	log     *os.File
}

func startProc(logPath string, argv ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	p := &proc{cmd: cmd, log: f}
	p.started = time.Now()
	if err := childproc.Start(cmd); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	return p, nil
}

// cpuSeconds is the user+system CPU time the process used so far,
// including that of the children it waited for (iptables-restore).
func (p *proc) cpuSeconds() float64 {
	return pidCPUSeconds(p.cmd.Process.Pid)
}

// peakRSSMiB is the process's high-water resident set size.
func (p *proc) peakRSSMiB() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func (p *proc) stop() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	p.log.Close()
}

// treeCPUSeconds is cpuSeconds summed over the process and every process
// below it: the whole work of a process tree such as `svcnet up`.
func (p *proc) treeCPUSeconds() float64 {
	total := pidCPUSeconds(p.cmd.Process.Pid)
	for _, pid := range proctree.Descendants(p.cmd.Process.Pid) {
		total += pidCPUSeconds(pid)
	}
	return total
}

// Settling: a process is busy in a sample when it used at least
// busyCPU of CPU since the one before (40% of a core), and settled once
// no sample has been busy for settleWindow.
const (
	settleSample = 50 * time.Millisecond
	busyCPU      = 0.02
	settleWindow = time.Second
)

// coldSyncEnd says in the reports when a cold sync is over.
var coldSyncEnd = fmt.Sprintf("the probe Service (created after all others) and about %d background Services spread over all of them "+
	"answer and the proxy has finished its work (its last %s with %.0f%% of a core or more, before %s with none)",
	coldSyncSample, settleSample, 100*busyCPU/settleSample.Seconds(), settleWindow)

// settled waits until the process has settled and returns the time of its
// last busy sample: when it finished the work it was doing.
func (p *proc) settled(deadline time.Time) (time.Time, error) {
	lastBusy, last := time.Now(), p.cpuSeconds()
	for time.Since(lastBusy) < settleWindow {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("still busy (%.1f CPU seconds so far)", last)
		}
		time.Sleep(settleSample)
		cpu := p.cpuSeconds()
		if cpu-last >= busyCPU {
			lastBusy = time.Now()
		}
		last = cpu
	}
	return lastBusy, nil
}

func pidCPUSeconds(pid int) float64 {
	fields := proctree.Stat(pid)
	if len(fields) < 15 {
		return 0
	}
	var sum float64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseFloat(fields[i], 64)
		sum += v
	}
	return sum / 100 // USER_HZ
}
