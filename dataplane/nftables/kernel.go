package nftables

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// NewInterface returns knftables' real implementation (the nft binary) for
// a family's table, which also writes the elements of the table's data
// sets and maps over netlink (the Backend uses that when it can). A
// non-empty netnsPath (such as /run/netns/<name>) runs nft, and opens the
// netlink sockets, in that network namespace, which is how one process
// programs simulated nodes.
func NewInterface(f corev1.IPFamily, table, netnsPath string) (knftables.Interface, error) {
	var nft knftables.Interface
	err := netns.Do(netnsPath, func() error {
		var err error
		// Listing over netlink: `nft --json --terse list table` still
		// reads every element, 34 s at 20,000 Services.
		nft, err = knftables.New(familyOf(f).nft, table, knftables.UseNetlink)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &kernel{Interface: nft, netns: netnsPath, elements: newNetlinkElements(familyOf(f), table, netnsPath)}, nil
}

// kernel is knftables' interface run inside a network namespace (nft is
// started from a thread there), with the netlink element writer beside it.
type kernel struct {
	knftables.Interface
	netns    string
	elements *netlinkElements
}

// netlinkWriter is an interface that can write data elements over
// netlink; knftables' Fake cannot, and then elements go in the knftables
// transaction.
type netlinkWriter interface {
	netlink() *netlinkElements
}

func (k *kernel) netlink() *netlinkElements { return k.elements }

func (k *kernel) Run(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(k.netns, func() error { return k.Interface.Run(ctx, tx) })
}

func (k *kernel) Check(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(k.netns, func() error { return k.Interface.Check(ctx, tx) })
}

func (k *kernel) ListAll(ctx context.Context) (out map[string][]string, err error) {
	err = netns.Do(k.netns, func() error {
		out, err = k.Interface.ListAll(ctx)
		return err
	})
	return out, err
}

func (k *kernel) List(ctx context.Context, objectType string) (out []string, err error) {
	err = netns.Do(k.netns, func() error {
		out, err = k.Interface.List(ctx, objectType)
		return err
	})
	return out, err
}

func (k *kernel) ListRules(ctx context.Context, chain string) (out []*knftables.Rule, err error) {
	err = netns.Do(k.netns, func() error {
		out, err = k.Interface.ListRules(ctx, chain)
		return err
	})
	return out, err
}

func (k *kernel) ListElements(ctx context.Context, objectType, name string) (out []*knftables.Element, err error) {
	err = netns.Do(k.netns, func() error {
		out, err = k.Interface.ListElements(ctx, objectType, name)
		return err
	})
	return out, err
}

func (k *kernel) ListCounters(ctx context.Context) (out []*knftables.Counter, err error) {
	err = netns.Do(k.netns, func() error {
		out, err = k.Interface.ListCounters(ctx)
		return err
	})
	return out, err
}
