// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"context"
	"slices"

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
	k := &kernel{netns: netnsPath, table: table, family: f, elements: newNetlinkElements(familyOf(f), table, netnsPath)}
	err := netns.Do(netnsPath, func() error {
		var err error
		if k.Interface, err = knftables.New(familyOf(f).nft, table); err != nil {
			return err
		}
		// Listing over netlink: `nft --json --terse list table` still
		// reads every element, 34 s at 20,000 Services.
		k.listing, err = knftables.New(familyOf(f).nft, table, knftables.UseNetlink)
		return err
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// kernel is knftables' interface run inside a network namespace (nft is
// started from a thread there), with the netlink element writer beside it.
type kernel struct {
	knftables.Interface
	// listing is knftables over netlink, for List and ListAll of a table
	// that exists.
	listing  knftables.Interface
	netns    string
	table    string
	family   corev1.IPFamily
	elements *netlinkElements
}

// lister is the interface that lists the table: over netlink when the
// table exists, else through nft, whose answer for a missing table is
// fast and knftables' typed not-found error (knftables' netlink listing
// reports one untyped).
func (k *kernel) lister() knftables.Interface {
	names, err := Tables(k.family, k.netns)
	if err == nil && slices.Contains(names, k.table) {
		return k.listing
	}
	return k.Interface
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
	l := k.lister()
	err = netns.Do(k.netns, func() error {
		out, err = l.ListAll(ctx)
		return err
	})
	return out, err
}

func (k *kernel) List(ctx context.Context, objectType string) (out []string, err error) {
	l := k.lister()
	err = netns.Do(k.netns, func() error {
		out, err = l.List(ctx, objectType)
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
