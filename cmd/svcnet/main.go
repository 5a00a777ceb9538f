// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command svcnet is the Service networking control plane: `svcnet manager`
// runs the controllers, `svcnet agent` a node's rules, `svcnet version`
// tells what this build is. `svcnet up` hands over to the simulator's own
// binary, svcnet-up, which this one does not link (hack/prodimports
// checks it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/platform/restconfig"
	"github.com/svcnet-io/svcnet/internal/platform/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := commandFor(os.Args[0]).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcnet:", err)
		os.Exit(1)
	}
}

// commandFor is the command a binary called argv0 runs: the agent with
// kube-proxy's command line when it is called kube-proxy, svcnet's
// commands otherwise.
func commandFor(argv0 string) *cobra.Command {
	if filepath.Base(argv0) == kubeProxyName {
		cmd := newKubeProxyCommand()
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return cmd
	}
	return newRootCommand()
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "svcnet",
		Short:         "Kubernetes Service networking: IP and port allocation, EndpointSlices, node rules",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newManagerCommand(), newAgentCommand(), newKubeProxyCommand(), newUpCommand(), newVersionCommand())
	return root
}

// addLogFlags adds klog's -v and friends, the Kubernetes component way.
func addLogFlags(fs *pflag.FlagSet) {
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	for _, name := range []string{"v", "vmodule", "logtostderr", "log_file"} {
		if f := gofs.Lookup(name); f != nil {
			fs.AddGoFlag(f)
		}
	}
}

func newManagerCommand() *cobra.Command {
	opts := manager.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the svcnet controllers against a cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return err
			}
			ctrl.SetLogger(klog.NewKlogr())
			cfg, err := restconfig.Load(opts.Kubeconfig, "")
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	addLogFlags(cmd.Flags())
	return cmd
}

func newAgentCommand() *cobra.Command {
	return agentCommand("agent", "Program this node's kube-proxy compatible rules from Services and EndpointSlices", agent.DefaultOptions())
}

// kubeProxyName is the command name under which svcnet runs as kube-proxy:
// `svcnet kube-proxy`, or the binary called (linked as) kube-proxy, so that
// kube-proxy's DaemonSet runs the agent with its own command line.
const kubeProxyName = "kube-proxy"

// newKubeProxyCommand is the agent with kube-proxy's defaults where
// svcnet's differ (agent.KubeProxyOptions).
func newKubeProxyCommand() *cobra.Command {
	return agentCommand(kubeProxyName, "Run the agent with kube-proxy's command line and defaults (see docs/operations.md)", agent.KubeProxyOptions())
}

func agentCommand(use, short string, opts agent.Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	opts.AddFlags(cmd.Flags())
	addLogFlags(cmd.Flags())
	return cmd
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this build",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
		},
	}
}
