// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package proctree reads process trees from /proc: the processes below a
// process, and their stat fields. Tests and benchmarks use it to find
// every process `svcnet up` started and to sum their CPU time.
package proctree

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Stat returns the fields of /proc/<pid>/stat after the command name (the
// name is in parentheses and may hold spaces): Stat(pid)[0] is the state,
// [1] the parent pid, [11] and [12] utime and stime. It returns nil when
// the process is gone.
func Stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// Descendants lists every process below pid, parents before children.
func Descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := Stat(p); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}
