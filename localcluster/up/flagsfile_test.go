// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestParseFlagsFile(t *testing.T) {
	args, err := parseFlagsFile([]byte("# header\n--kubeconfig=/k\n\n  --controllers=*,-endpointslice-controller  \n"))
	if err != nil || !slices.Equal(args, []string{"--kubeconfig=/k", "--controllers=*,-endpointslice-controller"}) {
		t.Errorf("parsed %q, %v", args, err)
	}
	for _, bad := range []string{"kube-controller-manager\n--v=2\n", "# nothing\n"} {
		if _, err := parseFlagsFile([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Editing the flags file restarts the child with the new flags; a file
// that does not parse changes nothing.
func TestFollowFlagsFile(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "child.flags")
	first := []string{"-cimport time; time.sleep(60)"}
	if err := writeFlagsFile(path, "child", first); err != nil {
		t.Fatal(err)
	}
	policy := restartPolicy{limit: 5, window: time.Minute, delay: 10 * time.Millisecond, maxDelay: 10 * time.Millisecond}
	sv, _, err := startSupervised("child", python, first, filepath.Join(dir, "child.log"), policy)
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan *process, 1)
	go sv.run(io.Discard, failed)
	defer sv.stop(time.Second)
	go followFlagsFile(path, sv, io.Discard, 10*time.Millisecond)

	argsNow := func() []string {
		sv.mu.Lock()
		defer sv.mu.Unlock()
		return sv.cur.cmd.Args[1:]
	}
	if err := os.WriteFile(path, []byte("not a flag\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := argsNow(); !slices.Equal(got, first) {
		t.Fatalf("a file that does not parse changed the child: %q", got)
	}
	second := []string{"-cimport time; time.sleep(61)"}
	if err := writeFlagsFile(path, "child", second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(argsNow(), second) {
		if time.Now().After(deadline) {
			t.Fatalf("the child still runs %q after its flags file changed", argsNow())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case p := <-failed:
		t.Fatalf("supervision gave up on %s", p.status())
	default:
	}
}
