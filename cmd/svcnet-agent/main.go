// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command svcnet-agent is the node agent, the binary of the agent's image:
// `svcnet-agent agent` programs a node's rules and announces its
// LoadBalancer addresses, `svcnet-agent kube-proxy` (or this binary
// called kube-proxy) does the same with kube-proxy's command line. It
// links none of the manager's controllers, so that a process on every
// node carries only what it runs (docs/BENCHMARKS.md (n)); `svcnet agent`
// hands over to it.
package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/svcnet-io/svcnet/internal/app/agentcmd"
	"github.com/svcnet-io/svcnet/internal/app/cli"
)

func main() {
	cli.Main("svcnet-agent", commandFor(os.Args[0]))
}

// commandFor is the command a binary called argv0 runs: the agent with
// kube-proxy's command line when it is called kube-proxy, the agent's
// commands otherwise.
func commandFor(argv0 string) *cobra.Command {
	if filepath.Base(argv0) == agentcmd.KubeProxyName {
		cmd := agentcmd.NewKubeProxyCommand()
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return cmd
	}
	root := &cobra.Command{
		Use:           "svcnet-agent",
		Short:         "The svcnet node agent: a node's Service rules (kube-proxy's iptables and nftables modes) and LoadBalancer announcements",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(agentcmd.NewAgentCommand(), agentcmd.NewKubeProxyCommand(), cli.NewVersionCommand())
	return root
}
