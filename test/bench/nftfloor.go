// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/dataplane/nftables"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// The kernel's floor in nftables mode (k): what each proxy's own writes
// of a cold sync and of single endpoint changes cost the kernel, with no
// API server, watch or agent loop in the time. svcnet's side is its
// backend (dataplane/nftables) programming a scratch network namespace
// as the agent does, rendering included. kube-proxy's side is the
// transactions the real kube-proxy wrote on a node of its own for the
// same Services and changes, taken from its log and replayed with
// `nft -f -` as kube-proxy runs them.
const (
	floorChanges = 20
	floorTitle   = "## nftables: the kernel's floor"
)

// floorData is (k)'s record.
type floorData struct {
	Changes int         `json:"changes"`
	Repeats int         `json:"repeats"`
	Sizes   []floorSize `json:"sizes"`
}

// floorSize is one size's runs, the two layouts alternating, and what
// kube-proxy's log gave for it.
type floorSize struct {
	Services int `json:"services"`
	// KubeProxyColdTransactions and KubeProxyColdBytes are the
	// transactions of kube-proxy's cold sync and their length in nft's
	// language.
	KubeProxyColdTransactions int        `json:"kubeProxyColdTransactions"`
	KubeProxyColdBytes        int        `json:"kubeProxyColdBytes"`
	Runs                      []floorRun `json:"runs"`
}

type floorRun struct {
	Layout  string          `json:"layout"`
	Load    time.Duration   `json:"load"`
	Changes []time.Duration `json:"changes"`
}

const (
	floorSvcnet    = "svcnet"
	floorKubeProxy = "kube-proxy"
)

func nftFloorReport(ctx context.Context, root string, scale int, skip string, keep bool) (string, error) {
	if skip != "" {
		return fmt.Sprintf("%s\n\nNot run: %s.\n", floorTitle, skip), nil
	}
	rec := newRecord[floorData](root, "k")
	rec.Tools["kube-proxy"] = toolVersion(filepath.Join(root, "bin/k8s/kube-proxy"))
	rec.Tools["nft"] = nftVersion()
	data := floorData{Changes: floorChanges, Repeats: *repeats}
	sampler := newLoadSampler()
	for _, size := range []int{1000 / scale, 10000 / scale} {
		progress("(k) kube-proxy's transactions at %d Services\n", size)
		capture, err := captureKubeProxy(ctx, root, size)
		if err != nil {
			return "", fmt.Errorf("(k) at %d Services: %w", size, err)
		}
		fs := floorSize{Services: size, KubeProxyColdTransactions: len(capture.cold)}
		for _, tx := range capture.cold {
			fs.KubeProxyColdBytes += len(tx)
		}
		for i := range *repeats {
			for _, layout := range []string{floorSvcnet, floorKubeProxy} {
				progress("(k) %s at %d Services (run %d/%d)\n", layout, size, i+1, *repeats)
				run, err := inScratchNS(func(path string) (floorRun, error) {
					if layout == floorSvcnet {
						return svcnetFloor(ctx, path, size)
					}
					return capture.replay(ctx, path)
				})
				if err != nil {
					return "", fmt.Errorf("(k) %s at %d Services: %w", layout, size, err)
				}
				fs.Runs = append(fs.Runs, run)
			}
		}
		data.Sizes = append(data.Sizes, fs)
	}
	return rec.close(root, sampler, data, keep, renderFloor)
}

// renderFloor writes (k) from its record alone.
func renderFloor(rec *record[floorData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(floorTitle))
	fmt.Fprintf(&b, "What a cold sync and single endpoint changes cost the kernel in nftables mode (%s), each proxy writing its own "+
		"table in a scratch network namespace: no API server, watch or agent loop in the time. svcnet's side is its backend "+
		"(dataplane/nftables) programming the namespace as the agent does, rendering included: rules and chains through `nft`, "+
		"the elements of its maps over netlink. kube-proxy's side (%s, nftables mode, --iptables-min-sync-period=0) is what "+
		"kube-proxy itself wrote: it ran on a node of its own against kube-apiserver with the same Services, took the same changes, "+
		"and its log (`--vmodule=proxier=9`) gave every transaction it ran, replayed here in order with `nft -f -` as kube-proxy "+
		"runs them. kube-proxy deletes the chains a sync left unused in a transaction of its own at a later sync; that one is "+
		"not in its log and is not replayed. Each Service has 10 endpoints; a change replaces one endpoint of one Service, "+
		"%d changes a run. Each layout runs %d times at each size, the two alternating; cold load and change p50 are the median "+
		"of the runs with the smallest and largest, the slowest change is of all the runs' changes. %s\n\n",
		rec.Tools["nft"], rec.Tools["kube-proxy"], d.Changes, d.Repeats, rec.loadNote())
	b.WriteString("| layout | Services | cold load (s) | change p50 (ms) | slowest change (ms) |\n|---|---|---|---|---|\n")
	for _, s := range d.Sizes {
		var load, p50 [2]float64
		for k, layout := range []string{floorSvcnet, floorKubeProxy} {
			runs := runsWhere(s.Runs, func(r floorRun) bool { return r.Layout == layout })
			loads := column(runs, func(r floorRun) float64 { return r.Load.Seconds() })
			p50s := column(runs, func(r floorRun) float64 { return millis(percentile(r.Changes, 0.5)) })
			var all []time.Duration
			for _, r := range runs {
				all = append(all, r.Changes...)
			}
			load[k], p50[k] = median(loads), median(p50s)
			name := layout
			if layout == floorKubeProxy {
				name = fmt.Sprintf("kube-proxy (its cold sync: %d transactions, %.1f MB)", s.KubeProxyColdTransactions, float64(s.KubeProxyColdBytes)/1e6)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %.1f (of %d) |\n", name, s.Services, spreadOf(loads, "%.3f"), spreadOf(p50s, "%.1f"),
				millis(slices.Max(all)), len(all))
		}
		fmt.Fprintf(&b, "| **svcnet/kube-proxy** | %d | **%.2fx** | **%.2fx** | |\n", s.Services, ratio(load[0], load[1]), ratio(p50[0], p50[1]))
	}
	return b.String()
}

// inScratchNS runs run in a network namespace made for it.
func inScratchNS(run func(path string) (floorRun, error)) (floorRun, error) {
	path := netlab.Path(fmt.Sprintf("svcnet-floor%04d", rand.IntN(10000)))
	if err := netns.Create(path); err != nil {
		return floorRun{}, err
	}
	defer func() { _ = netns.Delete(path) }()
	return run(path)
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

// floorChanged is the Service the c-th change of a run at size Services
// replaces an endpoint of, and which endpoint.
func floorChanged(c, size int) (service, endpoint int) {
	return (c * 7919) % size, c % 10
}

func svcnetFloor(ctx context.Context, path string, size int) (floorRun, error) {
	r := floorRun{Layout: floorSvcnet}
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
	r.Load = time.Since(start)
	next := size * 10
	for c := range floorChanges {
		i, j := floorChanged(c, size)
		eps[i][j] = floorEndpoint(next)
		next++
		start := time.Now()
		b.SetService(types.NamespacedName{Namespace: "bench", Name: fmt.Sprintf("svc%d", i)}, floorPort(i, eps[i]))
		if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
			return r, err
		}
		r.Changes = append(r.Changes, time.Since(start))
	}
	return r, nil
}

// kubeProxyCapture is what kube-proxy ran on its node: the transactions
// of its cold sync, then every later one with the change it carries.
type kubeProxyCapture struct {
	cold  []string
	later []capturedTx
}

type capturedTx struct {
	text string
	// change is the index of the change the transaction carries, -1 for
	// one that carries none (a periodic sync).
	change int
}

// captureKubeProxy runs kube-proxy in nftables mode on a node of a world
// of size Services, makes the floor's changes one after the other, each
// once kube-proxy has written the one before, and returns what it ran.
func captureKubeProxy(ctx context.Context, root string, size int) (kubeProxyCapture, error) {
	var c kubeProxyCapture
	dir, err := os.MkdirTemp("", "svcnet-bench-")
	if err != nil {
		return c, err
	}
	defer os.RemoveAll(dir)
	w, err := newAgentWorld(ctx, size)
	if err != nil {
		return c, err
	}
	defer w.close()
	n, p, logPath, err := w.startKubeProxy(ctx, root, dir, "nftables", "--iptables-min-sync-period=0", "--vmodule=proxier=9")
	if err != nil {
		return c, err
	}
	defer p.stop()
	if _, err := n.waitForAll(ctx, append([]string{n.probeIP}, w.sample...), p.started); err != nil {
		return c, fmt.Errorf("kube-proxy's cold sync: %w (log: %s)", err, logPath)
	}
	if _, err := p.settled(p.started.Add(agentTimeout)); err != nil {
		return c, fmt.Errorf("kube-proxy's cold sync: %w", err)
	}
	cold, coldEnd, err := loggedTransactions(logPath, 0)
	if err != nil {
		return c, err
	}
	c.cold = cold
	ips, err := w.floorChanges(ctx, size, logPath, coldEnd)
	if err != nil {
		return c, err
	}
	later, _, err := loggedTransactions(logPath, coldEnd)
	if err != nil {
		return c, err
	}
	return c, c.markChanges(later, ips)
}

// floorChanges makes the floor's changes in w, each after kube-proxy has
// logged the transaction of the one before (in its log at logPath, read
// from byte offset from on), and returns the endpoint each change
// brought in.
func (w *agentWorld) floorChanges(ctx context.Context, size int, logPath string, from int64) ([]string, error) {
	var ips []string
	for c := range floorChanges {
		i, j := floorChanged(c, size)
		var s discoveryv1.EndpointSlice
		if err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: fmt.Sprintf("svc%d", i)}, &s); err != nil {
			return nil, err
		}
		ip := w.endpointIP()
		s.Endpoints[j].Addresses = []string{ip}
		if err := w.env.Client.Update(ctx, &s); err != nil {
			return nil, err
		}
		ips = append(ips, ip)
		if err := waitLogged(ctx, logPath, from, ip); err != nil {
			return nil, fmt.Errorf("change %d: %w", c, err)
		}
	}
	return ips, nil
}

// markChanges keeps later as c's later transactions, each marked with
// the change whose new endpoint it is the first to write.
func (c *kubeProxyCapture) markChanges(later []string, ips []string) error {
	next := 0
	for _, tx := range later {
		mark := -1
		if next < len(ips) && writesEndpoint(tx, ips[next]) {
			mark = next
			next++
		}
		c.later = append(c.later, capturedTx{text: tx, change: mark})
	}
	if next < len(ips) {
		return fmt.Errorf("kube-proxy's log has no transaction writing endpoint %s (change %d)", ips[next], next)
	}
	return nil
}

// replay runs the captured transactions in the namespace at path, in
// order, and times them.
func (c kubeProxyCapture) replay(ctx context.Context, path string) (floorRun, error) {
	r := floorRun{Layout: floorKubeProxy}
	for _, tx := range c.cold {
		d, err := nftApply(ctx, path, tx)
		if err != nil {
			return r, err
		}
		r.Load += d
	}
	for _, tx := range c.later {
		d, err := nftApply(ctx, path, tx.text)
		if err != nil {
			return r, err
		}
		if tx.change >= 0 {
			r.Changes = append(r.Changes, d)
		}
	}
	return r, nil
}

// nftApply runs a transaction with `nft -f -` in a namespace, as
// knftables does, and times it.
func nftApply(ctx context.Context, path, text string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := netns.Run(path, cmd); err != nil {
		return 0, fmt.Errorf("nft -f: %w: %s", err, firstLines(out.String(), 5))
	}
	return time.Since(start), nil
}
