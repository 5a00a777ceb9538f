package nftables

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// NewInterface returns knftables' real implementation (the nft binary) for
// a family's table. A non-empty netnsPath (such as /run/netns/<name>) runs
// nft in that network namespace, which is how one process programs
// simulated nodes.
func NewInterface(f corev1.IPFamily, table, netnsPath string) (knftables.Interface, error) {
	var nft knftables.Interface
	err := netns.Do(netnsPath, func() error {
		var err error
		nft, err = knftables.New(familyOf(f).nft, table)
		return err
	})
	if err != nil {
		return nil, err
	}
	if netnsPath == "" {
		return nft, nil
	}
	return &inNetNS{Interface: nft, path: netnsPath}, nil
}

// inNetNS runs every nft command of an Interface in a network namespace.
type inNetNS struct {
	knftables.Interface
	path string
}

func (n *inNetNS) Run(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(n.path, func() error { return n.Interface.Run(ctx, tx) })
}

func (n *inNetNS) Check(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(n.path, func() error { return n.Interface.Check(ctx, tx) })
}

func (n *inNetNS) List(ctx context.Context, objectType string) (out []string, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.List(ctx, objectType)
		return err
	})
	return out, err
}

func (n *inNetNS) ListRules(ctx context.Context, chain string) (out []*knftables.Rule, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.ListRules(ctx, chain)
		return err
	})
	return out, err
}

func (n *inNetNS) ListElements(ctx context.Context, objectType, name string) (out []*knftables.Element, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.ListElements(ctx, objectType, name)
		return err
	})
	return out, err
}
