// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// simulatorBinary is the program `svcnet up` hands over to, looked for
// beside svcnet (make build puts both into bin/).
const simulatorBinary = "svcnet-up"

// newUpCommand keeps `svcnet up` the user's spelling: it replaces this
// process with svcnet-up and its arguments, flags and --help included, so
// that signals and the exit status are the simulator's own.
func newUpCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "up",
		Short:              "Run a whole Service networking control plane on this machine (no cluster needed; runs svcnet-up)",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding %s beside svcnet: %w", simulatorBinary, err)
			}
			path, err := simulatorPath(filepath.Dir(exe))
			if err != nil {
				return err
			}
			return syscall.Exec(path, append([]string{path}, args...), os.Environ())
		},
	}
}

// simulatorPath is svcnet-up in dir, or an error that says how to build it.
func simulatorPath(dir string) (string, error) {
	path := filepath.Join(dir, simulatorBinary)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("svcnet up runs the simulated cluster from %s, which is missing or not executable: build it with `make build` (bin/svcnet and bin/svcnet-up) or `go build -o %s ./cmd/svcnet-up`", path, dir)
	}
	return path, nil
}
