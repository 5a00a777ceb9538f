// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command svcnet is the Service networking control plane: `svcnet manager`
// runs the controllers, `svcnet migrate` prepares a cluster's move to
// svcnet, `svcnet version` tells what this build is. The
// node agent is a binary of its own, svcnet-agent, and the simulated
// cluster another, svcnet-up; `svcnet agent`, `svcnet kube-proxy` and
// `svcnet up` hand over to them, found beside this one. This binary links
// neither (hack/prodimports checks it).
package main

import (
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svcnet-io/svcnet/internal/app/cli"
	"github.com/svcnet-io/svcnet/internal/app/explaincmd"
	"github.com/svcnet-io/svcnet/internal/app/manager"
	"github.com/svcnet-io/svcnet/internal/app/migratecmd"
	"github.com/svcnet-io/svcnet/internal/platform/restconfig"
)

// The binaries svcnet hands commands over to, beside it (make build puts
// all three into bin/).
const (
	agentBinary     = "svcnet-agent"
	simulatorBinary = "svcnet-up"
)

func main() {
	cli.Main("svcnet", newRootCommand())
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "svcnet",
		Short:         "Kubernetes Service networking: IP and port allocation, EndpointSlices, node rules",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newManagerCommand(), cli.NewVersionCommand(), migratecmd.NewCommand(), explaincmd.NewCommand(),
		cli.HandOver("agent", "Program this node's kube-proxy compatible rules from Services and EndpointSlices (runs svcnet-agent agent)",
			agentBinary, buildHint(agentBinary), "agent"),
		cli.HandOver("kube-proxy", "Run the agent with kube-proxy's command line and defaults (runs svcnet-agent kube-proxy)",
			agentBinary, buildHint(agentBinary), "kube-proxy"),
		cli.HandOver("up", "Run a whole Service networking control plane on this machine (no cluster needed; runs svcnet-up)",
			simulatorBinary, buildHint(simulatorBinary)))
	return root
}

// buildHint says how to build one of the binaries svcnet hands over to.
func buildHint(binary string) string {
	return "`make build` (bin/svcnet, bin/svcnet-agent and bin/svcnet-up) or `go build ./cmd/" + binary + "`"
}

func newManagerCommand() *cobra.Command {
	opts := manager.DefaultOptions()
	cmd := &cobra.Command{
		Use:   "manager",
		Short: "Run the svcnet controllers against a cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := opts.Complete()
			if err != nil {
				return err
			}
			ctrl.SetLogger(klog.NewKlogr())
			cfg, err := restconfig.Load(c.Kubeconfig, "")
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, c)
		},
	}
	opts.AddFlags(cmd.Flags())
	cli.AddLogFlags(cmd.Flags())
	return cmd
}
