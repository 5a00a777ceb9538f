// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package migratecmd is `svcnet migrate`: the commands that move a live
// cluster from kube-proxy, kube-controller-manager's Service controllers
// and MetalLB to svcnet (docs/operations.md). They read the cluster and
// write nothing to it.
package migratecmd

import (
	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/platform/restconfig"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// options are the flags every migrate command shares.
type options struct {
	kubeconfig string
}

// NewCommand is `migrate` and its subcommands.
func NewCommand() *cobra.Command {
	opts := &options{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Prepare a cluster's move from kube-proxy, kube-controller-manager's Service controllers and MetalLB to svcnet (reads, never writes)",
		Args:  cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&opts.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config or the in-cluster configuration.")
	cmd.AddCommand(newPlanCommand(opts), newMetalLBCommand(opts))
	return cmd
}

// client reads the cluster the kubeconfig names.
func (o *options) client() (client.Client, error) {
	cfg, err := restconfig.Load(o.kubeconfig, "")
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}
