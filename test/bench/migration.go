// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/harness/nodecheck"
	"github.com/svcnet-io/svcnet/test/harness/trafficload"
)

// The migration benchmark (p): one node moves from upstream's kube-proxy
// to svcnet's agent and back, by its svcnet.io/proxy label, as
// docs/operations.md moves a node, while the node opens a new connection
// to a ClusterIP Service every few milliseconds and keeps one open. Each
// run is a fresh API server and node; each direction is measured on its
// own.

var migrateRepeats = flag.Int("migrate-repeats", 5, "runs of each kube-proxy/svcnet mode pair in the migration benchmark (p)")

// migrationPairs are the moves measured: kube-proxy's mode, svcnet's.
var migrationPairs = [][2]string{{"iptables", "iptables"}, {"nftables", "nftables"}, {"iptables", "nftables"}}

// migrateWait bounds each step of a move.
const migrateWait = time.Minute

// moveResult is one direction of one run, as recorded: the traffic of
// the move and how long it took, from the label's change to the node
// served by the new proxy alone with nothing of the old one left.
type moveResult struct {
	NewOK      int           `json:"newOK"`
	NewFailed  int           `json:"newFailed"`
	KeptBroken bool          `json:"keptBroken"`
	LongestGap time.Duration `json:"longestGap"`
	Took       time.Duration `json:"took"`
}

func moveOf(r trafficload.Result, took time.Duration) moveResult {
	return moveResult{NewOK: r.NewOK, NewFailed: len(r.NewFailed), KeptBroken: len(r.KeptBroken) > 0, LongestGap: r.LongestGap, Took: took}
}

// migrationPairRuns are one pair's runs, each direction's.
type migrationPairRuns struct {
	KubeProxyMode string       `json:"kubeProxyMode"`
	Mode          string       `json:"mode"`
	There         []moveResult `json:"there"`
	Back          []moveResult `json:"back"`
}

// migrationData is (p)'s record.
type migrationData struct {
	Runs                int                 `json:"runs"`
	NewConnectionPeriod time.Duration       `json:"newConnectionPeriod"`
	KeptRequestPeriod   time.Duration       `json:"keptRequestPeriod"`
	Pairs               []migrationPairRuns `json:"pairs"`
}

const migrationTitle = "## Moving a node from kube-proxy to svcnet's agent and back, under traffic (p)"

// migration is one run's world: the node, its proxies and the load.
type migration struct {
	root, dir, kubeconfig string
	kubeProxyMode, mode   string
	w                     *agentWorld
	n                     *benchNode
	load                  *trafficload.Load
	kubeProxy, agent      *proc
}

func migrationReport(ctx context.Context, root string, scale int, skip string, keep bool) (string, error) {
	if skip != "" {
		return fmt.Sprintf("%s\n\nNot run: %s.\n", migrationTitle, skip), nil
	}
	rec := newRecord[migrationData](root, "p")
	rec.Tools["kube-proxy"] = toolVersion(filepath.Join(root, "bin/k8s/kube-proxy"))
	data := migrationData{Runs: max(1, *migrateRepeats/scale), NewConnectionPeriod: trafficload.NewConnectionPeriod,
		KeptRequestPeriod: trafficload.KeptRequestPeriod}
	sampler := newLoadSampler()
	for _, pair := range migrationPairs {
		runs := migrationPairRuns{KubeProxyMode: pair[0], Mode: pair[1]}
		for i := range data.Runs {
			progress("(p) kube-proxy %s -> svcnet %s, run %d of %d\n", pair[0], pair[1], i+1, data.Runs)
			there, back, err := migrateOnce(ctx, root, pair[0], pair[1])
			if err != nil {
				return "", fmt.Errorf("(p) kube-proxy %s -> svcnet %s: %w", pair[0], pair[1], err)
			}
			runs.There, runs.Back = append(runs.There, there), append(runs.Back, back)
		}
		data.Pairs = append(data.Pairs, runs)
	}
	return rec.close(root, sampler, data, keep, renderMigration)
}

// renderMigration writes (p) from its record alone.
func renderMigration(rec *record[migrationData]) string {
	var b strings.Builder
	d := rec.Data
	b.WriteString(rec.heading(migrationTitle))
	fmt.Fprintf(&b, "One node (a network namespace) with a ClusterIP Service of one endpoint; upstream's kube-proxy %s "+
		"(bin/k8s) serves it, svcnet's agent (bin/svcnet-agent) starts beside it on standby, both on kube-proxy's health and "+
		"metrics addresses. The node then moves by its `svcnet.io/proxy` label as docs/operations.md moves one: to svcnet "+
		"(the label, the agent takes its rules over, kube-proxy is stopped, the agent removes kube-proxy's leftovers) and back "+
		"(the label, the agent stands by, kube-proxy starts; in nftables mode the agent removes its table once kube-proxy's "+
		"rules serve; the agent is stopped). Meanwhile the node opens a new TCP connection to the Service every %s (timeout 2 s) "+
		"and keeps one HTTP/1.1 connection open with a request every %s. Each run is a fresh API server and node; %d runs per "+
		"pair, each cell the median with the smallest and largest run. \"Took\" is from the label's change until the new proxy "+
		"serves alone with nothing of the old one left (to svcnet: kube-proxy's own rules gone, of which there are none in "+
		"iptables mode, where the agent rewrites kube-proxy's chains in place; back: svcnet's table gone in nftables mode, "+
		"kube-proxy's first sync in iptables mode). UDP flows are covered by test/kernel/migrate_test.go and "+
		"test/e2e/migrate_test.go, not measured here. %s\n\n",
		rec.Tools["kube-proxy"], d.NewConnectionPeriod, d.KeptRequestPeriod, d.Runs, rec.loadNote())
	b.WriteString("| kube-proxy -> svcnet | direction | new connections | failed new connections | long-lived connection broke | longest gap between new connections (ms) | took (s) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, pair := range d.Pairs {
		for dir, rs := range [][]moveResult{pair.There, pair.Back} {
			oks := column(rs, func(r moveResult) float64 { return float64(r.NewOK) })
			gaps := column(rs, func(r moveResult) float64 { return millis(r.LongestGap) })
			took := column(rs, func(r moveResult) float64 { return r.Took.Seconds() })
			failed, broke := 0, 0
			for _, r := range rs {
				failed += r.NewFailed
				if r.KeptBroken {
					broke++
				}
			}
			fmt.Fprintf(&b, "| %s -> %s | %s | %s | %d in %d runs | in %d of %d runs | %s | %s |\n", pair.KubeProxyMode, pair.Mode,
				[]string{"to svcnet", "back to kube-proxy"}[dir], spreadOf(oks, "%.0f"), failed, len(rs), broke, len(rs), spreadOf(gaps, "%.1f"),
				spreadOf(took, "%.2f"))
		}
	}
	return b.String()
}

// migrateOnce runs one move there and back in a fresh world.
func migrateOnce(ctx context.Context, root, kubeProxyMode, mode string) (there, back moveResult, err error) {
	m := &migration{root: root, kubeProxyMode: kubeProxyMode, mode: mode}
	if m.dir, err = os.MkdirTemp("", "svcnet-bench-migrate"); err != nil {
		return there, back, err
	}
	defer func() {
		if err == nil {
			_ = os.RemoveAll(m.dir) // kept when the run failed, for its logs
		}
	}()
	if m.w, err = newAgentWorld(ctx, 0); err != nil {
		return there, back, err
	}
	defer m.w.close()
	defer m.stopAll()
	if err := m.startOnKubeProxy(ctx); err != nil {
		return there, back, err
	}
	if there, err = m.toSvcnet(ctx); err != nil {
		return there, back, err
	}
	back, err = m.toKubeProxy(ctx)
	return there, back, err
}

// startOnKubeProxy makes the node, serves it with kube-proxy, starts the
// load and the agent on standby.
func (m *migration) startOnKubeProxy(ctx context.Context) error {
	var err error
	if m.n, err = m.w.addNode(ctx); err != nil {
		return err
	}
	m.kubeconfig = filepath.Join(m.dir, "kubeconfig")
	if err := m.w.env.WriteKubeconfig(m.kubeconfig); err != nil {
		return err
	}
	if err := m.label(ctx, agent.NodeProxyKubeProxy); err != nil {
		return err
	}
	if err := m.startKubeProxy(); err != nil {
		return err
	}
	url := "http://" + m.w.probe.Spec.ClusterIP + "/"
	if err := m.until(ctx, "kube-proxy serves the Service", func() bool { _, err := netlab.Get(ctx, m.n.client, url); return err == nil }); err != nil {
		return err
	}
	m.load = trafficload.New()
	m.load.NewConnections(m.n.node.NetNS, url)
	if err := m.load.KeepConnection(m.n.node.NetNS, m.w.probe.Spec.ClusterIP); err != nil {
		return err
	}
	if m.agent, err = startProc(filepath.Join(m.dir, "agent.log"), append([]string{"ip", "netns", "exec", m.n.node.NetNS},
		filepath.Join(m.root, "bin/svcnet-agent"), "agent", "--kubeconfig="+m.kubeconfig, "--node-name="+m.n.node.Name, "--mode="+m.mode,
		"--cluster-cidr="+agentClusterCIDR, "--conntrack-max-per-core=0", "--announce=false",
		"--healthz-bind-address=0.0.0.0:10256", "--metrics-bind-address=127.0.0.1:10249", "--v=2")...); err != nil {
		return err
	}
	if err := m.logSays(ctx, "agent.log", "standing by", 1); err != nil {
		return err
	}
	if err := m.served(ctx, "kube-proxy with the agent on standby"); err != nil {
		return err
	}
	m.load.Phase()
	return nil
}

// toSvcnet moves the node to the agent.
func (m *migration) toSvcnet(ctx context.Context) (moveResult, error) {
	start := time.Now()
	if err := m.label(ctx, "svcnet"); err != nil {
		return moveResult{}, err
	}
	if err := m.logSays(ctx, "agent.log", "taking its rules over", 1); err != nil {
		return moveResult{}, err
	}
	m.kubeProxy.stop()
	m.kubeProxy = nil
	run := func(argv ...string) (string, error) { return m.w.lab.Run(m.n.node.NetNS, argv...) }
	if err := m.until(ctx, "kube-proxy's rules removed", func() bool { return nodecheck.KubeProxyLeftovers(run, m.mode) == "" }); err != nil {
		return moveResult{}, err
	}
	took := time.Since(start)
	if err := m.served(ctx, "svcnet alone"); err != nil {
		return moveResult{}, err
	}
	return moveOf(m.load.Phase(), took), nil
}

// toKubeProxy hands the node back to kube-proxy and stops the agent.
func (m *migration) toKubeProxy(ctx context.Context) (moveResult, error) {
	start := time.Now()
	if err := m.label(ctx, agent.NodeProxyKubeProxy); err != nil {
		return moveResult{}, err
	}
	if err := m.logSays(ctx, "agent.log", "standing by", 2); err != nil {
		return moveResult{}, err
	}
	if err := m.startKubeProxy(); err != nil {
		return moveResult{}, err
	}
	if m.mode == agent.ModeNFTables {
		run := func(argv ...string) (string, error) { return m.w.lab.Run(m.n.node.NetNS, argv...) }
		if err := m.until(ctx, "svcnet's table removed", func() bool { return !nodecheck.HasSvcnetTable(run) }); err != nil {
			return moveResult{}, err
		}
	} else if err := m.logSays(ctx, "kube-proxy.log", "SyncProxyRules complete", 1); err != nil {
		return moveResult{}, err
	}
	took := time.Since(start)
	m.agent.stop()
	m.agent = nil
	if err := m.served(ctx, "kube-proxy alone"); err != nil {
		return moveResult{}, err
	}
	m.load.Stop()
	return moveOf(m.load.Phase(), took), nil
}

func (m *migration) startKubeProxy() error {
	p, err := startProc(filepath.Join(m.dir, "kube-proxy.log"), append([]string{"ip", "netns", "exec", m.n.node.NetNS},
		kubeProxyArgv(m.root, m.kubeconfig, m.n.node.Name, m.kubeProxyMode)...)...)
	m.kubeProxy = p
	return err
}

func (m *migration) stopAll() {
	if m.load != nil {
		m.load.Stop()
	}
	for _, p := range []*proc{m.kubeProxy, m.agent} {
		if p != nil {
			p.stop()
		}
	}
}

// label sets the node's svcnet.io/proxy label.
func (m *migration) label(ctx context.Context, value string) error {
	var node corev1.Node
	if err := m.w.env.Client.Get(ctx, client.ObjectKey{Name: m.n.node.Name}, &node); err != nil {
		return err
	}
	return addons.LabelNode(ctx, m.w.env.Client, &node, agent.LabelNodeProxy, value)
}

// logSays waits until the log file in the run's folder holds want at
// least times times.
func (m *migration) logSays(ctx context.Context, file, want string, times int) error {
	return m.until(ctx, fmt.Sprintf("%s saying %q %d times", file, want, times), func() bool {
		b, _ := os.ReadFile(filepath.Join(m.dir, file))
		return strings.Count(string(b), want) >= times
	})
}

// served waits until every flow of the load was answered again.
func (m *migration) served(ctx context.Context, what string) error {
	before := m.load.Snapshot()
	return m.until(ctx, "traffic answered with "+what, func() bool { return m.load.AnsweredSince(before) })
}

func (m *migration) until(ctx context.Context, what string, cond func() bool) error {
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, migrateWait, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		return fmt.Errorf("%s: not within %s (logs in %s)", what, migrateWait, m.dir)
	}
	return nil
}
