// Command svcnet is the Service networking control plane: `svcnet manager`
// runs the controllers, `svcnet up` runs a whole control plane on one
// machine, `svcnet version` tells what this build is.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/localcluster/up"
	"github.com/svcnet-io/svcnet/internal/platform/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "svcnet:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "svcnet",
		Short:         "Kubernetes Service networking: IP and port allocation, EndpointSlices, node rules",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newManagerCommand(), newAgentCommand(), newUpCommand(), newVersionCommand())
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
			cfg, err := restConfig(opts.Kubeconfig)
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
	opts := agent.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Program this node's kube-proxy compatible rules from Services and EndpointSlices",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := opts.Complete()
			if err != nil {
				return err
			}
			log := klog.NewKlogr()
			ctrl.SetLogger(log)
			if cfg.Cleanup {
				return agent.Cleanup(cmd.Context(), cfg, log)
			}
			restCfg, err := restConfig(opts.Kubeconfig)
			if err != nil {
				return err
			}
			if percent, ok := agent.GCPercentFor(os.LookupEnv); ok {
				debug.SetGCPercent(percent)
			}
			return agent.Run(cmd.Context(), restCfg, cfg, log)
		},
	}
	opts.AddFlags(cmd.Flags())
	addLogFlags(cmd.Flags())
	return cmd
}

func newUpCommand() *cobra.Command {
	cfg := up.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a whole Service networking control plane on this machine (no cluster needed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(klog.NewKlogr())
			cfg.Out = cmd.OutOrStdout()
			cfg.Complete(cmd.Flags())
			return up.Run(cmd.Context(), cfg)
		},
	}
	cfg.AddFlags(cmd.Flags())
	cmd.Flags().IntVarP(&cfg.Verbosity, "v", "v", 0, "Log verbosity of the in-process svcnet manager (logs/svcnet-manager.log).")
	return cmd
}

// restConfig loads a kubeconfig, or the in-cluster configuration and then
// $KUBECONFIG when path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading client configuration: %w", err)
		}
		return cfg, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return cfg, nil
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
