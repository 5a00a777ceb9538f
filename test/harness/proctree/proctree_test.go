// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package proctree

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestDescendants(t *testing.T) {
	// sh starts sleep as its child: a grandchild of this test.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var kids []int
	for range 200 { // until sh has started sleep
		if kids = Descendants(os.Getpid()); len(kids) >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("descendants %v lack the child %d", kids, cmd.Process.Pid)
	}
	var grandchild int
	for _, k := range kids {
		if f := Stat(k); len(f) > 1 && f[1] == strconv.Itoa(cmd.Process.Pid) {
			grandchild = k
		}
	}
	if grandchild == 0 {
		t.Fatalf("descendants %v lack the child's own child", kids)
	}
	if i, j := slices.Index(kids, cmd.Process.Pid), slices.Index(kids, grandchild); i > j {
		t.Fatalf("child listed after its own child: %v", kids)
	}
	if Stat(-1) != nil {
		t.Fatal("Stat of a process that does not exist is not nil")
	}
}
