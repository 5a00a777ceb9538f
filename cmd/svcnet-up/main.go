// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command svcnet-up runs a whole Service networking control plane on one
// machine with no cluster: etcd, kube-apiserver, kube-controller-manager,
// svcnet's manager and agents (run from the svcnet and svcnet-agent
// binaries beside it) and
// simulated nodes in network namespaces. Users type `svcnet up`, which
// hands over to this program; the production svcnet binary links none of
// it.
package main

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/internal/app/cli"
	"github.com/svcnet-io/svcnet/localcluster/up"
)

func main() {
	cli.Main("svcnet up", newCommand())
}

func newCommand() *cobra.Command {
	opts := up.DefaultOptions()
	cmd := &cobra.Command{
		Use:           "svcnet up",
		Short:         "Run a whole Service networking control plane on this machine (no cluster needed)",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(klog.NewKlogr())
			opts.Out = cmd.OutOrStdout()
			cfg, err := opts.Complete(cmd.Flags())
			if err != nil {
				return err
			}
			return up.Run(cmd.Context(), cfg)
		},
	}
	opts.AddFlags(cmd.Flags())
	cmd.Flags().IntVarP(&opts.Verbosity, "v", "v", 0, "Log verbosity of the svcnet manager, the agents and the simulator (logs/svcnet-manager.log, logs/agent-*.log, logs/svcnet-up.log).")
	return cmd
}
