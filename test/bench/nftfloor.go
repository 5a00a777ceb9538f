// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// The kernel's floor in nftables mode: the transactions of a cold sync and
// of one endpoint change, applied bare with nft in a scratch network
// namespace (no API server, no agent), for svcnet's layout and for
// kube-proxy 1.37's (a chain per Service whose one rule DNATs through an
// anonymous map of its endpoints, reached through the service-ips verdict
// map), at the sizes of scenarios (g) and (h).
const floorChanges = 20

type floorResult struct {
	layout   string
	services int
	load     time.Duration
	changes  []time.Duration
}

func nftFloorReport(ctx context.Context, scale int, skip string) (string, error) {
	var b strings.Builder
	b.WriteString("## nftables: the kernel's floor\n\n")
	b.WriteString("The transactions one sync needs, applied bare with `nft -f` in a scratch network namespace: no API server, " +
		"no watch, no agent loop. svcnet's layout is written by its own backend (dataplane/nftables, rendering included); " +
		"kube-proxy 1.37's is generated as kube-proxy writes it (service-ips verdict map, a chain per Service with " +
		"`dnat to numgen random mod 10 map { ... }`). A change replaces one endpoint of one Service: for svcnet two " +
		"map elements and a hairpin entry, for kube-proxy's layout the Service chain's rule. Every transaction with a new rule or " +
		"a goto element makes the kernel validate the whole table at commit; svcnet's element changes are never validated.\n\n")
	if skip != "" {
		fmt.Fprintf(&b, "Not run: %s.\n", skip)
		return b.String(), nil
	}
	b.WriteString("| layout | Services x 10 endpoints | cold load | change p50 | change p99 |\n|---|---|---|---|---|\n")
	for _, size := range []int{1000 / scale, 10000 / scale} {
		for _, run := range []func(context.Context, string, int) (floorResult, error){svcnetFloor, kubeProxyFloor} {
			r, err := inScratchNS(ctx, size, run)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", r.layout, r.services, r.load.Round(time.Millisecond),
				ms(percentile(r.changes, 0.5)), ms(percentile(r.changes, 0.99)))
		}
	}
	return b.String(), nil
}

func inScratchNS(ctx context.Context, size int, run func(context.Context, string, int) (floorResult, error)) (floorResult, error) {
	path := netlab.Path(fmt.Sprintf("svcnet-floor%04d", rand.IntN(10000)))
	if err := netns.Create(path); err != nil {
		return floorResult{}, err
	}
	defer func() { _ = netns.Delete(path) }()
	return run(ctx, path, size)
}

func floorEndpoint(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(240 + i>>16&0x0f), byte(i >> 8), byte(i)})
}

func floorClusterIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
}

func floorPort(i int, eps []netip.Addr) []*model.ServicePort {
	p := &model.ServicePort{Name: fmt.Sprintf("bench/svc%d:http", i), Namespace: "bench", Service: fmt.Sprintf("svc%d", i),
		Protocol: corev1.ProtocolTCP, ClusterIP: floorClusterIP(i), Port: 80, HasEndpoints: true}
	for _, ip := range eps {
		p.ClusterEndpoints = append(p.ClusterEndpoints, model.Endpoint{IP: ip, Port: agentPort})
	}
	return []*model.ServicePort{p}
}

func svcnetFloor(ctx context.Context, path string, size int) (floorResult, error) {
	r := floorResult{layout: "svcnet", services: size}
	nft, err := nftables.NewInterface(corev1.IPv4Protocol, nftables.TableName, path)
	if err != nil {
		return r, err
	}
	b := nftables.NewBackend(corev1.IPv4Protocol, nft, nftables.Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix(agentClusterCIDR)}})
	eps := make([][]netip.Addr, size)
	for i := range eps {
		for j := range 10 {
			eps[i] = append(eps[i], floorEndpoint(i*10+j))
		}
	}
	start := time.Now()
	for i := range eps {
		b.SetService(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}, floorPort(i, eps[i]))
	}
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		return r, err
	}
	r.load = time.Since(start)
	next := size * 10
	for c := range floorChanges {
		i := (c * 7919) % size
		eps[i][c%10] = floorEndpoint(next)
		next++
		start := time.Now()
		b.SetService(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}, floorPort(i, eps[i]))
		if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
			return r, err
		}
		r.changes = append(r.changes, time.Since(start))
	}
	return r, nil
}

// kubeProxyRule is the rule of a Service's chain in kube-proxy 1.37's
// layout.
func kubeProxyRule(i int, eps []netip.Addr) string {
	var elems []string
	for j, ip := range eps {
		elems = append(elems, fmt.Sprintf("%d : %s . %d", j, ip, agentPort))
	}
	return fmt.Sprintf("add rule ip kube-proxy service-%d meta l4proto tcp dnat ip to numgen random mod %d map { %s }\n", i, len(eps), strings.Join(elems, ", "))
}

func kubeProxyFloor(ctx context.Context, path string, size int) (floorResult, error) {
	r := floorResult{layout: "kube-proxy 1.37", services: size}
	var t strings.Builder
	t.WriteString("add table ip kube-proxy\n" +
		"add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n" +
		"add chain ip kube-proxy services\n" +
		"add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips\n" +
		"add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority dstnat ; }\n" +
		"add rule ip kube-proxy nat-prerouting jump services\n")
	eps := make([][]netip.Addr, size)
	for i := range eps {
		for j := range 10 {
			eps[i] = append(eps[i], floorEndpoint(i*10+j))
		}
		fmt.Fprintf(&t, "add chain ip kube-proxy service-%d\n", i)
		t.WriteString(kubeProxyRule(i, eps[i]))
		fmt.Fprintf(&t, "add element ip kube-proxy service-ips { %s . tcp . 80 : goto service-%d }\n", floorClusterIP(i), i)
	}
	var err error
	if r.load, err = nftFile(ctx, path, t.String()); err != nil {
		return r, err
	}
	next := size * 10
	for c := range floorChanges {
		i := (c * 7919) % size
		eps[i][c%10] = floorEndpoint(next)
		next++
		d, err := nftFile(ctx, path, fmt.Sprintf("flush chain ip kube-proxy service-%d\n", i)+kubeProxyRule(i, eps[i]))
		if err != nil {
			return r, err
		}
		r.changes = append(r.changes, d)
	}
	return r, nil
}

// nftFile applies a transaction with `nft -f` in a namespace and times it.
func nftFile(ctx context.Context, path, text string) (time.Duration, error) {
	f, err := os.CreateTemp("", "svcnet-floor-*.nft")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return 0, err
	}
	f.Close()
	cmd := exec.CommandContext(ctx, "nft", "-f", f.Name())
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := netns.Run(path, cmd); err != nil {
		return 0, fmt.Errorf("nft -f: %w: %s", err, out.String())
	}
	return time.Since(start), nil
}
