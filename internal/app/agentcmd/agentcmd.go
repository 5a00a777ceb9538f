// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package agentcmd is the node agent's command line: `svcnet-agent agent`
// with svcnet's defaults, and `svcnet-agent kube-proxy` (or the binary
// called kube-proxy) with kube-proxy's.
package agentcmd

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/app/cli"
	"github.com/svcnet-io/svcnet/internal/platform/version"
)

// KubeProxyName is the command name under which the agent runs as
// kube-proxy: `svcnet-agent kube-proxy`, or the binary called (linked
// as) kube-proxy, so that kube-proxy's DaemonSet runs the agent with its
// own command line.
const KubeProxyName = "kube-proxy"

// NewAgentCommand is `agent`: the agent with svcnet's defaults.
func NewAgentCommand() *cobra.Command {
	return agentCommand("agent", "Program this node's kube-proxy compatible rules from Services and EndpointSlices", agent.DefaultOptions())
}

// NewKubeProxyCommand is the agent with kube-proxy's defaults where
// svcnet's differ (agent.KubeProxyOptions).
func NewKubeProxyCommand() *cobra.Command {
	return agentCommand(KubeProxyName, "Run the agent with kube-proxy's command line and defaults (see docs/operations.md)", agent.KubeProxyOptions())
}

func agentCommand(use, short string, opts agent.Options) *cobra.Command {
	var printVersion string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if done, err := versionRequested(cmd, printVersion); done || err != nil {
				return err
			}
			cfg, err := opts.Complete()
			if err != nil {
				return err
			}
			if cfg.LogVerbosity != nil && !cmd.Flags().Changed("v") {
				if err := cmd.Flags().Set("v", strconv.Itoa(*cfg.LogVerbosity)); err != nil {
					return fmt.Errorf("--config logging.verbosity: %w", err)
				}
			}
			log := klog.NewKlogr()
			ctrl.SetLogger(log)
			if percent, ok := agent.GCPercentFor(os.LookupEnv); ok {
				debug.SetGCPercent(percent)
			}
			return agent.Main(cmd.Context(), cfg, log)
		},
	}
	bindFlags(cmd.Flags(), &opts, &printVersion)
	return cmd
}

// bindFlags binds the agent's command line to fs: its options, klog's
// flags and --version.
func bindFlags(fs *pflag.FlagSet, opts *agent.Options, printVersion *string) {
	opts.AddFlags(fs)
	cli.AddLogFlags(fs)
	fs.StringVar(printVersion, "version", "false", "Print the version and exit (kube-proxy's --version; true and raw print svcnet's version, false runs the agent).")
	fs.Lookup("version").NoOptDefVal = "true"
}

// CheckKubeProxyArgs completes kube-proxy's arguments (without the
// binary) as `svcnet-agent kube-proxy` would on start, without running
// it: the Config, whose Ignored names what the agent would not act on,
// or the error naming every flag or --config field it refuses.
// `svcnet migrate plan` asks it of kube-proxy's DaemonSet.
func CheckKubeProxyArgs(args []string) (agent.Config, error) {
	return checkArgs(KubeProxyName, agent.KubeProxyOptions(), args)
}

// CheckAgentArgs is CheckKubeProxyArgs for `svcnet-agent agent`'s
// arguments after the subcommand, as svcnet's agent DaemonSet gives them.
func CheckAgentArgs(args []string) (agent.Config, error) {
	return checkArgs("agent", agent.DefaultOptions(), args)
}

func checkArgs(name string, opts agent.Options, args []string) (agent.Config, error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var printVersion string
	bindFlags(fs, &opts, &printVersion)
	if err := fs.Parse(args); err != nil {
		return agent.Config{}, err
	}
	if fs.NArg() > 0 {
		return agent.Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return opts.Complete()
}

// versionRequested prints the version for --version, as kube-proxy does
// for --version and --version=raw, and tells whether the command is done.
// kube-proxy's --version=vX.Y.Z (report another version) is refused: the
// agent reports only its own.
func versionRequested(cmd *cobra.Command, value string) (bool, error) {
	switch value {
	case "false":
		return false, nil
	case "true", "raw":
		fmt.Fprintln(cmd.OutOrStdout(), version.String())
		return true, nil
	}
	return true, fmt.Errorf("--version=%s: the agent reports only its own version (true, raw or false)", value)
}
