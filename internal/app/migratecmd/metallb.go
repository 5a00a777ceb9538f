// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migratecmd

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
)

// metallbOptions are the flags of `migrate metallb`.
type metallbOptions struct {
	*options
	files  []string
	strict bool
}

// newMetalLBCommand is `migrate metallb`: MetalLB's configuration, from the
// cluster or from files, written as svcnet's.
func newMetalLBCommand(opts *options) *cobra.Command {
	o := &metallbOptions{options: opts}
	cmd := &cobra.Command{
		Use:   "metallb",
		Short: "Write MetalLB's address pools and advertisements as svcnet's LoadBalancerIPPools and LoadBalancerAnnouncements",
		Long: `Reads MetalLB's IPAddressPools, L2Advertisements, BGPAdvertisements and
BGPPeers (metallb.io) from the cluster, or from the files given with -f, and
writes the equivalent LoadBalancerIPPools and LoadBalancerAnnouncements as
YAML to stdout, ready for kubectl apply -f. Every MetalLB field that has no
svcnet counterpart, or not an exact one, is listed on stderr and as comments
at the top of the output. Nothing is written to the cluster.

Converted pools keep their names and labels and get the label
` + metallb.PoolLabel + `=<name>, by which the announcements select the pools
MetalLB's advertisements name.`,
		Example: `  # From the cluster of the current kubeconfig:
  svcnet migrate metallb > svcnet-lb.yaml
  # From a Helm render or kubectl get -o yaml, failing on anything not converted exactly:
  kubectl get ipaddresspools,l2advertisements -n metallb-system -o yaml | svcnet migrate metallb -f - --strict`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "A YAML or JSON file of MetalLB's objects (one or several documents, or kind: List); - is stdin; repeatable. Unset: read the cluster.")
	cmd.Flags().BoolVar(&o.strict, "strict", false, "Fail, writing no objects, if any MetalLB field is not converted exactly.")
	return cmd
}

func (o *metallbOptions) run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	objs, err := o.read(ctx, stdin)
	if err != nil {
		return err
	}
	res, err := metallb.Convert(objs)
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "Warning: %s\n", w)
	}
	if o.strict && len(res.Warnings) > 0 {
		return fmt.Errorf("%d MetalLB field(s) not converted exactly (above); without --strict they are written as comments", len(res.Warnings))
	}
	return metallb.WriteYAML(stdout, res)
}

// read gets MetalLB's objects from the files, or else from the cluster.
func (o *metallbOptions) read(ctx context.Context, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	if len(o.files) == 0 {
		c, err := o.client()
		if err != nil {
			return nil, err
		}
		return metallb.List(ctx, c)
	}
	var out []*unstructured.Unstructured
	for _, name := range o.files {
		objs, err := decodeFile(name, stdin)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func decodeFile(name string, stdin io.Reader) ([]*unstructured.Unstructured, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	objs, err := metallb.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return objs, nil
}
