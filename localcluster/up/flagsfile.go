// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// kcmFlagsFile holds kube-controller-manager's flags in the data dir:
// editing it restarts kube-controller-manager with the new ones, as a
// kubelet restarts a static Pod whose manifest changed (kubeadm's
// /etc/kubernetes/manifests/kube-controller-manager.yaml). svcnet up
// writes it at each start.
const kcmFlagsFile = "kube-controller-manager.flags"

// flagsFileHeader opens a flags file.
const flagsFileHeader = "# %s's flags, one per line; svcnet up restarts it with them when this file changes\n" +
	"# (as a kubelet restarts a static Pod whose manifest changed), and writes it again at its next start.\n"

// writeFlagsFile writes name's flags to path.
func writeFlagsFile(path, name string, args []string) error {
	return os.WriteFile(path, []byte(fmt.Sprintf(flagsFileHeader, name)+strings.Join(args, "\n")+"\n"), 0o600)
}

// parseFlagsFile reads the flags of a flags file: one per line, blank
// lines and lines starting with # left out.
func parseFlagsFile(data []byte) ([]string, error) {
	var args []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "-") {
			return nil, fmt.Errorf("%q is not a flag", line)
		}
		args = append(args, line)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no flags")
	}
	return args, nil
}

// followFlagsFile restarts sv with the flags of path each time the file
// changes, checking every period, until sv's supervision ends. A file
// that cannot be read or parsed is reported on out and changes nothing.
func followFlagsFile(path string, sv *supervised, out io.Writer, period time.Duration) {
	last, _ := os.ReadFile(path)
	for !sv.isStopping() {
		time.Sleep(period)
		data, err := os.ReadFile(path)
		if err != nil || bytes.Equal(data, last) {
			continue
		}
		last = data
		args, err := parseFlagsFile(data)
		if err != nil {
			fmt.Fprintf(out, "%s: %v; %s keeps its flags\n", path, err, sv.name)
			continue
		}
		fmt.Fprintf(out, "%s changed: restarting %s with %s\n", path, sv.name, strings.Join(args, " "))
		sv.restartWith(args)
	}
}

// restartWith makes the next process of the child run with args and ends
// the current one, which run then restarts.
func (sv *supervised) restartWith(args []string) {
	sv.mu.Lock()
	sv.args = args
	p := sv.cur
	sv.mu.Unlock()
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
}
