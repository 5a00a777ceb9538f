// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package cli is what svcnet's command lines share: klog's flags, the
// version command, how a command runs and how one binary hands a command
// over to another built beside it (svcnet's `up` to svcnet-up, its
// `agent` and `kube-proxy` to svcnet-agent).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/svcnet-io/svcnet/internal/platform/version"
)

// Main runs cmd until it returns or the process is interrupted, and exits
// with status 1 and "name: error" when it fails (an ExitError chooses the
// status, and says nothing when it wraps no error).
func Main(name string, cmd *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	code := 1
	var exit *ExitError
	if errors.As(err, &exit) {
		code = exit.Code
		if exit.Err == nil {
			os.Exit(code)
		}
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(code)
}

// ExitError ends a command with status Code: silently when Err is nil
// (the command has said what it had to), else with Err's message.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// AddLogFlags adds klog's -v and friends, the Kubernetes component way.
func AddLogFlags(fs *pflag.FlagSet) {
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	for _, name := range []string{"v", "vmodule", "logtostderr", "log_file"} {
		if f := gofs.Lookup(name); f != nil {
			fs.AddGoFlag(f)
		}
	}
}

// NewVersionCommand prints the version of this build.
func NewVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this build",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
		},
	}
}

// HandOver is a command that replaces this process with binary, found
// beside this one, and the given leading arguments followed by the
// user's: its flags and --help are the other binary's, and so are its
// signals and exit status. build says how to build binary when it is
// missing.
func HandOver(use, short, binary, build string, lead ...string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              short,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding %s beside this program: %w", binary, err)
			}
			path, err := SiblingPath(filepath.Dir(exe), binary, build)
			if err != nil {
				return err
			}
			argv := append(append([]string{path}, lead...), args...)
			return syscall.Exec(path, argv, os.Environ())
		},
	}
}

// SiblingPath is binary in dir, or an error that names it and says how to
// build it.
func SiblingPath(dir, binary, build string) (string, error) {
	path := filepath.Join(dir, binary)
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is missing or not executable: build it with %s", path, build)
	}
	return path, nil
}
